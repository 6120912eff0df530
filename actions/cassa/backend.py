"""Cassandra backend on cassandra-driver, driven from asyncio.

A batch is cut at its read-then-act jobs (fetch, lookups), which run in order
after everything before them is written. Between them, writes run
concurrently, at most `concurrency` requests in flight for the pool: function
writes are idempotent and order-free (see functions.py), so only user `cql` /
`template` statements keep their order, chained per client (or publisher and
topic) like the runner's lanes. Message and event-log rows of one partition go
in unlogged batches (one mutation each); index rows (topic, bucket) are written
once per process. Connection loss raises, and the runner retries the batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from cassandra import DriverException, RequestExecutionException
from cassandra.query import BatchStatement, BatchType

from actions.cassa import emqx44, schema
from actions.cassa.coerce import converters
from actions.cassa.functions import STATEMENTS, WRITERS, Write
from actions.cassa.reads import QUERIES, CassaStore
from actions.cassa.session import RECOVERABLE, AsyncSession, build_cluster, fatal_connect_error
from bridge.backend import Backend, Job, PermanentError
from bridge.batches import cut_at_reads, planned, read
from bridge.fetch import READERS
from bridge.plugin import FunctionAction, SqlAction, TemplateAction, ordering_key
from bridge.sql import cql_marker, render_sql

log = logging.getLogger(__name__)

_BATCH_ROWS = 100  # rows in one unlogged batch
_BATCH_BYTES = 1 << 20  # and bytes: well under Cassandra's largest mutation (half a commit log segment)
_KNOWN_MAX = 200_000  # index rows remembered as written
_REFUSALS = (DriverException, RequestExecutionException)  # a read the server refused fails its job only


Statement = tuple[Any, Sequence[Any] | None]  # (prepared statement or batch, bound values)


class _Unit:
    """Writes that succeed or fail together, for the jobs in `members`."""

    __slots__ = ("members", "once", "singles", "statements")

    def __init__(
        self,
        members: list[int],
        statements: list[Statement],
        once: tuple[Any, ...] | None = None,
        singles: list[_Unit] | None = None,
    ) -> None:
        self.members = members
        self.statements = statements  # run in order
        self.once = once  # an index row: remembered as written when the unit succeeds
        self.singles = singles  # a batch: its rows one by one, to find the culprit if it is refused


class CassaBackend(Backend):
    db = "cassa"
    emqx44_migration = emqx44.migrate  # hookbridge migrate-emqx44 (docs/migrate-from-emqx44.md)
    functions = frozenset(WRITERS) | frozenset(READERS)

    @property
    def keyspace(self) -> str:
        return str(self.pool["keyspace"])

    async def connect(self) -> None:
        self.cluster = build_cluster(self.pool)
        self.cql: AsyncSession | None = None
        self.prepared: dict[str, Any] = {}
        self._known: set[tuple[Any, ...]] = set()
        self._gate = asyncio.Semaphore(max(1, int(self.pool["concurrency"])))
        try:
            await self._open()
        except Exception as exc:
            # A wrong password or certificate will not fix itself: refuse to start.
            # The cluster merely not up yet: start anyway; batches wait and retry.
            fatal = fatal_connect_error(exc)
            if fatal is not None:
                await self.close()
                raise PermanentError(f"cannot log in to Cassandra: {fatal}") from None
            if not self.is_recoverable(exc):
                await self.close()
                raise
            log.warning("pool %s: Cassandra not reachable yet (%s); actions wait and retry", self.pool.id, exc)

    async def _open(self) -> None:
        """Connect, create the schema (auto_schema), prepare every statement; once."""
        if self.cql is None:
            try:
                self.cql = AsyncSession(await asyncio.to_thread(self.cluster.connect))
            except Exception:
                # the driver shuts a cluster down when its first connect fails: the next try needs a new one
                await asyncio.to_thread(self.cluster.shutdown)
                self.cluster = build_cluster(self.pool)
                raise
        if not self.prepared:
            if self.pool["auto_schema"]:
                await self.schema(apply=True)
            prepared = {}
            for name, text in {**STATEMENTS, **QUERIES}.items():
                prepared[name] = await self.cql.prepare(text.format(ks=self.keyspace))
            await asyncio.to_thread(self.cql.session.set_keyspace, self.keyspace)  # for user cql statements
            self.prepared = prepared
            self.store = CassaStore(self.cql, prepared)

    async def probe(self) -> None:
        await self._open()
        assert self.cql is not None
        await self.cql.execute("SELECT release_version FROM system.local")

    async def close(self) -> None:
        await asyncio.to_thread(self.cluster.shutdown)

    def is_recoverable(self, exc: BaseException) -> bool:
        return isinstance(exc, RECOVERABLE) or (isinstance(exc, OSError) and not isinstance(exc, PermissionError))

    async def schema(self, apply: bool) -> str:
        replication = self.pool["replication"]
        if apply:
            assert self.cql is not None
            for statement in schema.statements(self.keyspace, replication):
                await self.cql.execute(statement)
        return schema.describe(self.keyspace, replication)

    # -- batches -------------------------------------------------------------

    async def execute(self, batch: Sequence[Job]) -> list[BaseException | None]:
        await self._open()
        return await cut_at_reads(batch, self._write_run, lambda job: read(self, self.store, job, refusals=_REFUSALS))

    async def _write_run(self, batch: Sequence[Job], run: list[int], outcomes: list[BaseException | None]) -> None:
        if not run:
            return
        units, chains = await self._plan(batch, run, outcomes)
        tasks = [self._run_unit(unit, outcomes) for unit in units]
        tasks += [self._run_chain(chain, outcomes) for chain in chains]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result  # recoverable: the runner retries the whole batch (idempotent writes)
        if len(self._known) > _KNOWN_MAX:
            self._known.clear()
        self._known.update(u.once for u, ok in zip(units, results, strict=False) if ok is True and u.once)

    async def _plan(
        self, batch: Sequence[Job], run: list[int], outcomes: list[BaseException | None]
    ) -> tuple[list[_Unit], list[list[_Unit]]]:
        """Function writes as independent units; user statements as per-key chains (kept in order)."""
        grouped: dict[tuple[Any, ...], list[tuple[int, Write]]] = defaultdict(list)
        latest: dict[tuple[Any, ...], tuple[list[int], Write]] = {}
        once: dict[tuple[Any, ...], tuple[list[int], Write]] = {}
        units: list[_Unit] = []
        chains: dict[str, list[_Unit]] = defaultdict(list)
        for index in run:
            job = batch[index]
            action = job.rule.action
            if not isinstance(action, FunctionAction):
                try:
                    statements = await self._user_statements(job)
                except Exception as exc:
                    if self.is_recoverable(exc):
                        raise
                    outcomes[index] = exc
                    continue
                chains[ordering_key(job.event)].append(_Unit([index], statements))
                continue
            job_writes = [w for _, ws in planned(self, batch, [index], outcomes, _writer(action)) for w in ws]
            for write in job_writes:
                if write.once is not None:
                    if write.once not in self._known:
                        once.setdefault(write.once, ([], write))[0].append(index)
                elif write.latest and write.group is not None:
                    members, kept = latest.get(write.group, ([], write))
                    members.append(index)
                    latest[write.group] = (members, write if write.args[0] > kept.args[0] else kept)
                elif write.group is not None:
                    grouped[write.group].append((index, write))
                else:
                    units.append(_Unit([index], [(self.prepared[write.name], write.args)]))
        for members, write in latest.values():
            units.append(_Unit(members, [(self.prepared[write.name], write.args)]))
        for members, write in once.values():
            units.append(_Unit(members, [(self.prepared[write.name], write.args)], once=write.once))
        for writes in grouped.values():
            units.extend(self._batches(writes))
        return units, list(chains.values())

    def _batches(self, writes: list[tuple[int, Write]]) -> list[_Unit]:
        """Rows of one partition in unlogged batches (single-partition: one mutation, no batch log)."""
        units: list[_Unit] = []
        chunk: list[tuple[int, Write]] = []
        size = 0
        for index, write in writes:
            if chunk and (len(chunk) >= _BATCH_ROWS or size + write.size > _BATCH_BYTES):
                units.append(self._batch(chunk))
                chunk, size = [], 0
            chunk.append((index, write))
            size += write.size
        if chunk:
            units.append(self._batch(chunk))
        return units

    def _batch(self, chunk: list[tuple[int, Write]]) -> _Unit:
        singles = [_Unit([index], [(self.prepared[write.name], write.args)]) for index, write in chunk]
        if len(singles) == 1:
            return singles[0]
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for _, write in chunk:
            batch.add(self.prepared[write.name], write.args)
        return _Unit([index for index, _ in chunk], [(batch, None)], singles=singles)

    async def _user_statements(self, job: Job) -> list[Statement]:
        """A `cql` or `template` action's statements, prepared once per text, values converted to their types."""
        action = job.rule.action
        assert self.cql is not None
        if isinstance(action, SqlAction):
            texts = [(s.text, s.bind(job.values)) for s in action.statements]
        else:
            assert isinstance(action, TemplateAction)
            texts = render_sql(action.template, job.values, marker=cql_marker)
        out: list[Statement] = []
        for text, args in texts:
            prepared = await self.cql.prepare(text)
            convert = converters(prepared)
            if len(convert) != len(args):
                raise PermanentError(f"statement has {len(convert)} bind markers for {len(args)} values: {text}")
            out.append((prepared, [fn(value) for fn, value in zip(convert, args, strict=True)]))
        return out

    async def _run_unit(self, unit: _Unit, outcomes: list[BaseException | None]) -> bool:
        """True when every statement went in; a refused one fails the unit's jobs (recoverable errors raise)."""
        assert self.cql is not None
        try:
            for statement, args in unit.statements:
                async with self._gate:
                    await self.cql.execute(statement, args)
            return True
        except Exception as exc:
            if self.is_recoverable(exc):
                raise
            if unit.singles:  # a batch was refused: find the culprit row by row
                await asyncio.gather(*(self._run_unit(single, outcomes) for single in unit.singles))
                return False
            for member in unit.members:
                outcomes[member] = exc
            return False

    async def _run_chain(self, chain: list[_Unit], outcomes: list[BaseException | None]) -> bool:
        for unit in chain:
            await self._run_unit(unit, outcomes)
        return True


def _writer(action: FunctionAction) -> Callable[[Job], list[Write]]:
    """The function's writes for one job, made at once (a failure is the job's own)."""
    return lambda job: list(WRITERS[action.spec.impl_name](job))
