"""PostgreSQL backend on asyncpg.

A batch is cut at its read-then-act jobs; each run of writes in between goes out
in one transaction, with consecutive message / event-log inserts merged into one
multi-row statement. If the database rejects something in that transaction, the
run is replayed unit by unit (each in its own transaction) so only the culprit
fails. Connection loss raises, and the runner retries the whole batch: every
write is idempotent.
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from actions.pgsql import emqx44, schema
from actions.pgsql.coerce import converters
from actions.pgsql.functions import GROUPED, SINGLE, STAGE_COLUMNS, STAGE_TABLE, Write
from actions.pgsql.reads import PgsqlStore
from actions.values import Convert
from bridge.backend import Backend, Job
from bridge.batches import cut_at_reads, planned, read
from bridge.fetch import READERS
from bridge.plugin import FunctionAction, SqlAction, TemplateAction, settings_context
from bridge.sql import render_sql

log = logging.getLogger(__name__)

_RECOVERABLE = (
    OSError,
    asyncpg.PostgresConnectionError,  # connection refused / lost, too many clients
    asyncpg.CannotConnectNowError,  # starting up, shutting down
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.InterfaceError,  # connection closed under us
    asyncpg.SerializationError,
    asyncpg.DeadlockDetectedError,
    TimeoutError,
)

# SQLSTATEs that describe the server's state, not the statement: the same write succeeds once
# the server is writable again (read-only transaction, insufficient resources such as a full
# disk or too many connections, operator intervention such as a shutdown, connection errors).
_SERVER_STATE_CODES = frozenset({"25006"})
_SERVER_STATE_CLASSES = ("53", "57P", "08")

Unit = tuple[list[int], list[Write]]  # job indexes and the statements that write them


async def _prepare_connection(conn: Any) -> None:
    # Outside any batch transaction, so a rolled-back batch cannot take the table with it.
    await conn.execute(STAGE_TABLE)


class PgsqlBackend(Backend):
    db = "pgsql"
    emqx44_migration = emqx44.migrate  # hookbridge migrate-emqx44 (docs/migrate-from-emqx44.md)
    functions = frozenset(GROUPED) | frozenset(SINGLE) | frozenset(READERS)

    async def connect(self) -> None:
        host, port = self.pool["server"]
        self._converters: dict[str, list[Convert]] = {}
        self.conns: Any = await asyncpg.create_pool(
            host=host,
            port=port,
            user=self.pool["username"] or None,
            password=self.pool["password"] or None,
            database=self.pool["database"],
            ssl=settings_context(self.pool.settings) or False,
            min_size=0,  # connect on first use: a server that is down now must not stop the start
            max_size=max(2, self.pool["pool_size"]),
            command_timeout=60,
            init=_prepare_connection,
        )
        self._schema_pending = bool(self.pool["auto_schema"])
        try:
            await self._ensure_schema()
        except Exception as exc:
            # A wrong password or certificate will not fix itself: refuse to start.
            # The server merely not up yet: start anyway; batches wait and retry.
            if isinstance(exc, ssl.SSLError) or not self.is_recoverable(exc):
                raise
            log.warning("pool %s: PostgreSQL not reachable yet (%s); actions wait and retry", self.pool.id, exc)

    async def _ensure_schema(self) -> None:
        if self._schema_pending:
            await self.schema(apply=True)
            self._schema_pending = False
        else:
            await self.conns.fetchval("SELECT 1")  # connect now, so bad credentials show at start

    async def probe(self) -> None:
        await self.conns.fetchval("SELECT 1")

    async def close(self) -> None:
        await self.conns.close()

    def is_recoverable(self, exc: BaseException) -> bool:
        if isinstance(exc, _RECOVERABLE):
            return True
        state = getattr(exc, "sqlstate", None) if isinstance(exc, asyncpg.PostgresError) else None
        return isinstance(state, str) and (state in _SERVER_STATE_CODES or state.startswith(_SERVER_STATE_CLASSES))

    async def schema(self, apply: bool) -> str:
        if apply:
            async with self.conns.acquire() as conn, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(727274)")  # one bridge migrates at a time
                for statement in schema.SCHEMA:
                    await conn.execute(statement)
        return schema.describe()

    # -- batches -------------------------------------------------------------

    async def execute(self, batch: Sequence[Job]) -> list[BaseException | None]:
        if self._schema_pending:
            await self._ensure_schema()
        async with self.conns.acquire() as conn:
            store = PgsqlStore(conn)
            return await cut_at_reads(
                batch,
                functools.partial(self._write_run, conn),
                lambda job: read(self, store, job, refusals=(asyncpg.PostgresError,)),
            )

    def _units(self, batch: Sequence[Job], run: list[int], outcomes: list[BaseException | None]) -> list[Unit]:
        """The run's writes in order, except that every job of a merged kind (message and event
        log inserts) joins the one multi-row statement of its kind, at the kind's first place.

        Moving those inserts earlier is safe: they only add rows keyed by msgid (or append to the
        log), and a publish with both `on_message_publish` and `on_event_log` alternates the two
        kinds, which merged only consecutive runs before (one statement per job).
        """
        units: list[Unit] = []
        merged: dict[Callable[[Sequence[Job]], Write], int] = {}  # kind -> its unit's index
        members: list[list[int]] = []
        for index in run:
            job = batch[index]
            action = job.rule.action
            group = GROUPED.get(action.spec.impl_name) if isinstance(action, FunctionAction) else None
            if group is not None:
                if group not in merged:
                    merged[group] = len(units)
                    units.append(([], []))
                    members.append([])
                members[merged[group]].append(index)
                continue
            for _, writes in planned(self, batch, [index], outcomes, self._writes):
                units.append(([index], writes))
                members.append([index])
        for group, position in merged.items():
            jobs = members[position]
            units[position] = (jobs, [group([batch[i] for i in jobs])])
        return units

    def _writes(self, job: Job) -> list[Write]:
        action = job.rule.action
        if isinstance(action, FunctionAction):
            return SINGLE[action.spec.impl_name](job)
        if isinstance(action, SqlAction):
            return [Write(s.text, s.bind(job.values), coerce=True) for s in action.statements]
        assert isinstance(action, TemplateAction)
        return [Write(text, args, coerce=True) for text, args in render_sql(action.template, job.values)]

    async def _write_run(
        self, conn: Any, batch: Sequence[Job], run: list[int], outcomes: list[BaseException | None]
    ) -> None:
        units = self._units(batch, run, outcomes)
        if not units:
            return
        try:
            async with conn.transaction():
                for _, writes in units:
                    for write in writes:
                        await self._run(conn, write)
            return
        except Exception as exc:
            if self.is_recoverable(exc):
                raise
        for members, writes in units:  # find the culprit: one transaction per unit
            try:
                async with conn.transaction():
                    for write in writes:
                        await self._run(conn, write)
            except Exception as exc:
                if self.is_recoverable(exc):
                    raise
                for member in members:
                    outcomes[member] = exc

    async def _run(self, conn: Any, write: Write) -> None:
        if write.stage is not None:
            await conn.copy_records_to_table("mqtt_msg_stage", records=write.stage, columns=STAGE_COLUMNS)
        args = write.args
        if write.coerce:
            convert = self._converters.get(write.sql)
            if convert is None:
                statement = await conn.prepare(write.sql)
                convert = self._converters[write.sql] = converters([t.name for t in statement.get_parameters()])
            args = [fn(value) for fn, value in zip(convert, args, strict=True)]
        if write.on_duplicate is None:
            await conn.execute(write.sql, *args)
            return
        try:
            async with conn.transaction():  # a savepoint: a collision undoes only this statement
                await conn.execute(write.sql, *args)
        except asyncpg.UniqueViolationError:
            await conn.execute(write.on_duplicate, *args)

    async def maintenance(self) -> None:
        """Delete expired messages (rules with `expired_time`), in slices.

        `mqtt_topic` keeps topics whose messages are gone: removing them could race a
        concurrent insert of a new message on that topic and hide it from wildcard fetches.
        """
        if not self.trim_enabled:
            return
        while True:
            deleted = await self.conns.execute(
                "DELETE FROM mqtt_msg WHERE id IN "
                "(SELECT id FROM mqtt_msg WHERE expires_at < now() ORDER BY expires_at LIMIT 5000)"
            )
            if deleted != "DELETE 5000":
                break
