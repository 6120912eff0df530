"""A batch cut at its read-then-act jobs, once for every backend; the SQL backends' batching.

A read-then-act job (fetch, lookups; bridge/fetch.py) must see everything the
jobs before it wrote, so a backend writes the run of jobs before it first, then
reads, then goes on with the next run. How a run is written (one transaction,
bulk writes, a pipeline, concurrent statements) is the backend's own; `SqlBackend`
is that of the backends whose database has transactions (PostgreSQL, MySQL).
"""

from __future__ import annotations

import abc
import functools
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from bridge.backend import Backend, Job, PermanentError, W, Writers
from bridge.fetch import READERS, MessageStore
from bridge.rules import FunctionAction, SqlAction, TemplateAction
from bridge.sql import render_sql

log = logging.getLogger(__name__)

T = TypeVar("T")
Outcomes = list[BaseException | None]
WriteRun = Callable[[Sequence[Job], list[int], Outcomes], Awaitable[None]]
RunAlone = Callable[[Job], Awaitable[BaseException | None]]


def reader_of(job: Job) -> str | None:
    """The read-then-act function a job runs, if it runs one."""
    action = job.rule.action
    if isinstance(action, FunctionAction) and action.spec.impl_name in READERS:
        return action.spec.impl_name
    return None


def is_read(job: Job) -> bool:
    return reader_of(job) is not None


def planned(
    backend: Backend, batch: Sequence[Job], run: list[int], outcomes: Outcomes, plan: Callable[[Job], T]
) -> Iterator[tuple[int, T]]:
    """(index, plan(job)) for each job of `run` whose plan could be made. A job whose planning
    raises (a value that does not fit, a bug, a payload that breaks a parser) fails alone, with
    that error as its outcome: the other jobs of the batch, other clients' acknowledged messages
    among them, are still written. Only an error worth retrying fails the batch (raised)."""
    for index in run:
        try:
            yield index, plan(batch[index])
        except Exception as exc:
            if backend.is_recoverable(exc):
                raise
            outcomes[index] = exc


async def cut_at_reads(
    batch: Sequence[Job], write_run: WriteRun, run_alone: RunAlone, alone: Callable[[Job], bool] = is_read
) -> Outcomes:
    """Write each run of jobs with `write_run`; run every `alone` job by itself, after what precedes it.

    Returns one outcome per job (None: committed); `write_run` fills in those of its run.
    """
    outcomes: Outcomes = [None] * len(batch)
    run: list[int] = []
    for index, job in enumerate(batch):
        if alone(job):
            await write_run(batch, run, outcomes)
            run = []
            outcomes[index] = await run_alone(job)
        else:
            run.append(index)
    await write_run(batch, run, outcomes)
    return outcomes


async def read(
    backend: Backend, store: MessageStore, job: Job, refusals: tuple[type[BaseException], ...]
) -> BaseException | None:
    """Run a job's read-then-act function on `store`.

    An error worth retrying raises (the runner retries the batch); a refusal (`refusals`, the
    database saying no, or a PermanentError) fails this job only; anything else raises.
    """
    name = reader_of(job)
    assert name is not None
    try:
        await READERS[name](store, backend.ctx, job)
    except Exception as exc:
        if backend.is_recoverable(exc) or not isinstance(exc, (PermanentError, *refusals)):
            raise
        return exc
    return None


@dataclass(frozen=True, slots=True)
class Merged(Generic[W]):
    """A writer whose jobs of one run go out together (multi-row statements): `many` writes
    them all at once; called with one job, it writes that one."""

    many: Callable[[Sequence[Job]], list[W]]

    def __call__(self, job: Job) -> list[W]:
        return self.many([job])


Unit = tuple[list[int], list[W]]  # job indexes and the writes that write them


class SqlBackend(Backend, Generic[W]):
    """The batching of a backend whose database has transactions (PostgreSQL, MySQL).

    A batch is cut at its read-then-act jobs; each run of writes in between goes out in one
    transaction, with the jobs of a `Merged` writer (message and event-log inserts) merged into
    multi-row statements. If the database rejects something in that transaction, the run is
    replayed unit by unit (each in its own transaction) so only the culprit fails. Connection loss
    raises, and the runner retries the whole batch: every write is idempotent.

    A subclass brings its driver: `connect` creates `conns` (a pool with `acquire()`) and calls
    `start`; `transaction`, `statement`, `store`, `probe`, `schema` and `is_recoverable` speak
    its dialect; `writers` are its write functions (WRITERS of its functions.py).
    """

    title: ClassVar[str]  # the database's name in log lines
    writers: Writers[W]
    refusals: ClassVar[tuple[type[BaseException], ...]]  # the database saying no to a read
    conns: Any
    _schema_pending = False

    async def start(self) -> None:
        """Once the pool exists: create the schema (`auto_schema`) or connect once. A wrong password
        or certificate will not fix itself: it raises. A server merely not up yet is logged; batches
        wait and retry."""
        self._schema_pending = bool(self.pool["auto_schema"])
        try:
            await self._ensure_schema()
        except Exception as exc:
            if isinstance(exc, ssl.SSLError) or not self.is_recoverable(exc):
                raise
            log.warning("pool %s: %s not reachable yet (%s); actions wait and retry", self.pool.id, self.title, exc)

    async def _ensure_schema(self) -> None:
        if self._schema_pending:
            await self.schema(apply=True)
            self._schema_pending = False
        else:
            await self.probe()  # connect now, so bad credentials show at start

    @abc.abstractmethod
    def store(self, conn: Any) -> MessageStore:
        """The read-then-act functions' queries on one connection."""

    @abc.abstractmethod
    def statement(self, text: str, args: list[Any]) -> W:
        """One statement of a `sql` or template action, compiled with `$n` markers."""

    @abc.abstractmethod
    async def transaction(self, conn: Any, writes: Sequence[W]) -> None:
        """Run `writes` in order in one transaction, committed, or rolled back and raised."""

    async def execute(self, batch: Sequence[Job]) -> Outcomes:
        if self._schema_pending:
            await self._ensure_schema()
        async with self.conns.acquire() as conn:
            store = self.store(conn)
            return await cut_at_reads(
                batch,
                functools.partial(self._write_run, conn),
                lambda job: read(self, store, job, refusals=self.refusals),
            )

    def _units(self, batch: Sequence[Job], run: list[int], outcomes: Outcomes) -> list[Unit[W]]:
        """The run's writes in order, except that every job of a merged kind (message and event
        log inserts) joins the multi-row statements of its kind, at the kind's first place.

        Moving those inserts earlier is safe: they only add rows keyed by msgid (or append to the
        log), and a publish with both `on_message_publish` and `on_event_log` alternates the two kinds.
        """
        units: list[Unit[W]] = []
        merged: dict[Callable[[Sequence[Job]], list[W]], int] = {}  # kind -> its unit's index
        members: list[list[int]] = []
        for index in run:
            action = batch[index].rule.action
            writer = self.writers.get(action.spec.impl_name) if isinstance(action, FunctionAction) else None
            if isinstance(writer, Merged):
                many = writer.many
                if many not in merged:
                    merged[many] = len(units)
                    units.append(([], []))
                    members.append([])
                members[merged[many]].append(index)
                continue
            for _, writes in planned(self, batch, [index], outcomes, self._writes):
                units.append(([index], writes))
                members.append([index])
        for many, position in merged.items():
            jobs = members[position]
            units[position] = (jobs, many([batch[i] for i in jobs]))
        return units

    def _writes(self, job: Job) -> list[W]:
        action = job.rule.action
        if isinstance(action, FunctionAction):
            return self.writers[action.spec.impl_name](job)
        if isinstance(action, SqlAction):
            return [self.statement(s.text, s.bind(job.values)) for s in action.statements]
        assert isinstance(action, TemplateAction)
        return [self.statement(text, args) for text, args in render_sql(action.template, job.values)]

    async def _write_run(self, conn: Any, batch: Sequence[Job], run: list[int], outcomes: Outcomes) -> None:
        units = self._units(batch, run, outcomes)
        if not units:
            return
        try:
            await self.transaction(conn, [write for _, writes in units for write in writes])
            return
        except Exception as exc:
            if self.is_recoverable(exc):
                raise
        for members, writes in units:  # find the culprit: one transaction per unit
            try:
                await self.transaction(conn, writes)
            except Exception as exc:
                if self.is_recoverable(exc):
                    raise
                for member in members:
                    outcomes[member] = exc
