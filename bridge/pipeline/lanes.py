"""A runner's ordering lane: a bounded memory queue, the lane's spool behind it, one batch at a time.

Order within a lane is arrival order. While anything of the lane is spooled, new actions
are spooled too, and the lane writes its memory queue (older) before its spool (newer);
so nothing overtakes, across an outage or a restart. When the spool cannot write (disk
full) an action waits in memory only if nothing of its lane is on disk; otherwise it
waits for the spool, and so does its publisher.

No error ends a lane's task: a step that fails (the spool cannot read, a position cannot
be saved, a bug) is logged and tried again after a growing pause, so every lane resumes
by itself once space or the database is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import time
from collections import deque

from bridge.backend import Job
from bridge.pipeline.laneowner import LaneOwner
from bridge.pipeline.spool import LaneSpool, Record, RecordError, decode, encode

log = logging.getLogger(__name__)

# Set while a lane writes a batch. Events caused by that batch (a proxy
# subscription's session.subscribed, a fetch page's follow-up) are queued past
# the bound: waiting for room in a lane that is waiting for us would deadlock.
INSIDE_COMMIT = contextvars.ContextVar("inside_commit", default=False)

# Spooled records carry the submitting process, so that a publish spooled and read back by the
# same process keeps its place in the runner's "publishes committed" bookkeeping.
_PROCESS = f"{os.getpid()}-{id(object())}"
# Pauses after a failed step (and between tries of a spool that cannot write), doubling.
_RETRY_FIRST, _RETRY_MAX = 0.1, 5.0
_DROP_OLDEST = "spool full (overflow policy drop_oldest)"


class Lane:
    def __init__(self, runner: LaneOwner, index: int, capacity: int, spool: LaneSpool | None) -> None:
        self.runner = runner
        self.index = index
        self.capacity = capacity
        self.spool = spool
        self.memory: deque[Job] = deque()
        self.oldest_since = 0.0  # when the oldest action in memory arrived (time.monotonic)
        self.wakeup = asyncio.Event()
        self.room = asyncio.Event()
        self.busy = False
        self.batch: list[Job] = []  # being written
        self.batch_spooled = False  # the batch is in the spool too (it stays there until written)
        self._written_upto: tuple[tuple[int, int], int] | None = None  # spool position and records to ack
        self.current: frozenset[int] = frozenset()  # seqs of the batch being written
        self.spool_error = ""  # why the spool cannot write (disk full), while it cannot

    @property
    def depth(self) -> int:
        return len(self.memory) + (self.spool.pending if self.spool else 0)

    @property
    def quiet(self) -> bool:
        return not self.memory and not self.busy and not (self.spool and self.spool.pending)

    # -- intake --------------------------------------------------------------

    async def put(self, job: Job) -> None:
        runner = self.runner
        if INSIDE_COMMIT.get():
            self._to_memory(job)
            return
        pause = _RETRY_FIRST
        while self.spool is not None and (
            self.spool.pending or len(self.memory) >= self.capacity or not runner.healthy
        ):
            if await self._spool(job):
                self.wakeup.set()
                return
            if not self.spool.pending and len(self.memory) < self.capacity:
                break  # the spool cannot write, and nothing of this lane is on disk: memory keeps order
            # Older actions of this lane are on disk: wait until the lane takes some, or try again.
            self.room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.room.wait(), pause)
            pause = min(_RETRY_MAX, pause * 2)
        while len(self.memory) >= self.capacity:  # no spool: wait for room
            self.room.clear()
            await self.room.wait()
        self._to_memory(job)

    def _to_memory(self, job: Job) -> None:
        if not self.memory:
            self.oldest_since = time.monotonic()
        self.memory.append(job)
        self.wakeup.set()

    def spool_body(self, job: Job) -> bytes:
        return encode(job.rule.id, job.event, job.cursor, job.seq, _PROCESS)

    # -- spooling ------------------------------------------------------------

    async def _spool(self, job: Job) -> bool:
        """Write a job to the spool; False when the spool cannot write (it stays in memory)."""
        assert self.spool is not None
        body = self.spool_body(job)
        await self._room_for(len(body) + 8)
        try:
            self.spool.append(body)
        except OSError as exc:
            if not self.spool_error:
                log.error(
                    "pool %s: the spool cannot write (%s); actions wait for it, or in memory if none is spooled",
                    self.runner.pool_id,
                    exc,
                )
            self.spool_error = f"spool cannot write: {exc}"
            return False
        if self.spool_error:
            log.info("pool %s: the spool writes again", self.runner.pool_id)
            self.spool_error = ""
        self.runner.spooled([job])
        return True

    async def _room_for(self, size: int) -> None:
        """Wait until the shared budget has `size` bytes free, or make room (overflow policy)."""
        assert self.spool is not None
        budget = self.spool.budget
        while budget is not None and not budget.fits(size):
            if budget.overflow == "drop_oldest" and self._drop_oldest():
                continue
            budget.freed.clear()  # block: wait until a lane writes some of its spool
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(budget.freed.wait(), 1.0)

    def _drop_oldest(self) -> bool:
        """Drop the oldest spooled segment (not records being written right now); False if none."""
        assert self.spool is not None
        bodies, freed = self.spool.drop_oldest(keep_reading=self.busy and self.batch_spooled)
        if not freed:
            return False
        for body in bodies:
            try:
                record = decode(body)
            except ValueError:
                self.runner.dropped("unknown", _DROP_OLDEST, log_it=False)
                continue
            self.runner.dropped(record.rule_id, _DROP_OLDEST, self.seq_of(record), log_it=False)
        log.warning(
            "pool %s: spool full: dropped the %d oldest spooled actions (drop_oldest)", self.runner.pool_id, len(bodies)
        )
        return True

    # -- writing -------------------------------------------------------------

    async def run(self) -> None:
        pause = _RETRY_FIRST
        while True:
            try:
                await self._step()
                pause = _RETRY_FIRST
            except Exception as exc:  # never end the lane: log, pause, try again
                log.error(
                    "pool %s lane %d: %s: %s; trying again in %.1f s",
                    self.runner.pool_id,
                    self.index,
                    type(exc).__name__,
                    exc,
                    pause,
                )
                await asyncio.sleep(pause)
                pause = min(_RETRY_MAX, pause * 2)

    async def _step(self) -> None:
        """Write one batch: from memory (older) if any, else from the spool; or wait for work."""
        runner = self.runner
        if self.memory:
            await self._fill()
            batch = self._from_memory()
            self._written_upto = None
        elif self.spool is not None and self.spool.pending:
            batch, position, count = self._from_spool()
            self._written_upto = (position, count)
        else:
            await self._wait_for_work()
            return
        self.room.set()
        self.busy, self.batch, self.batch_spooled = True, batch, self._written_upto is not None
        self.current = frozenset(job.seq for job in batch)
        token = INSIDE_COMMIT.set(True)
        written = False
        try:
            if batch:
                await runner.commit(batch, self.spill)
            written = True
            if self._written_upto is not None:
                assert self.spool is not None
                self.spool.ack(*self._written_upto)
                if self.spool_error and not self.spool.pending:
                    log.info("pool %s: the spool is written out; it will be tried again when needed", runner.pool_id)
                    self.spool_error = ""
        finally:
            INSIDE_COMMIT.reset(token)
            if not written and not self.batch_spooled:
                self.memory.extendleft(reversed(batch))  # failed before it was written: first again
            self.busy, self.batch = False, []
            self.current = frozenset()
            runner.progress.set()

    async def _wait_for_work(self) -> None:
        self.wakeup.clear()
        if self.spool is None or not self.spool.unsaved:
            await self.wakeup.wait()
            return
        # The read position could not be saved (disk full): save it again from time to time.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wakeup.wait(), _RETRY_MAX)
        self.spool.save_position()

    async def _fill(self) -> None:
        """Give a small batch until `batch_time` after its oldest action arrived to fill up.

        Fewer, larger batches cost the bridge and the database less per action; the wait is
        bounded by its oldest action's age, so under load (actions queued while the last
        batch was written) there is none."""
        runner = self.runner
        if len(self.memory) >= runner.batch_size or runner.batch_time <= 0 or not runner.healthy:
            return
        wait = self.oldest_since + runner.batch_time - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)

    def _from_memory(self) -> list[Job]:
        limit = self.runner.batch_size
        batch: list[Job] = []
        while self.memory and len(batch) < limit:
            batch.append(self.memory.popleft())
        return batch

    def _from_spool(self) -> tuple[list[Job], tuple[int, int], int]:
        assert self.spool is not None
        bodies, position = self.spool.read(self.runner.batch_size)
        jobs = []
        for body in bodies:
            try:
                record = decode(body)
            except RecordError as exc:
                self.spool.report(f"{self.spool.directory}: {exc}")
                continue
            rule = self.runner.rule(record.rule_id)
            if rule is None:
                self.runner.dropped(record.rule_id, "its rule is no longer loaded", self.seq_of(record))
                continue
            jobs.append(Job(rule, record.event, seq=self.seq_of(record), cursor=record.cursor))
        return jobs, position, len(bodies)

    def spill(self) -> None:
        """The pool went down under this lane's batch: put the batch and the memory queue on disk
        (in front of what is spooled), so that from now on nothing of this lane lives in memory only.

        The batch gets a segment of its own, in front of the memory queue's: it is in flight (the
        lane retries it), so `drop_oldest` keeps the segment it is read from; the queue behind it
        holds the oldest actions that are not in flight, and must be the first to go."""
        if self.spool is None or self.batch_spooled:
            return
        try:
            if self.memory:
                self.spool.put_first([self.spool_body(job) for job in self.memory])
                self.runner.spooled(list(self.memory))
                self.memory.clear()
                self.room.set()
            position = self.spool.put_first([self.spool_body(job) for job in self.batch], mark=len(self.batch))
        except OSError as exc:
            # Whatever could not be written stays in memory: the batch is retried in place, and
            # a queue already on disk replays after it, so the order holds either way.
            self.spool.report(f"cannot spill to the spool: {exc}")
            return
        self.batch_spooled = True
        self._written_upto = (position, len(self.batch))
        self.runner.spooled(self.batch)

    @staticmethod
    def seq_of(record: Record) -> int:
        """The runner's number for a spooled action: only meaningful in the process that spooled it."""
        return record.seq if record.process == _PROCESS else 0

    def spool_leftovers(self) -> None:
        """At shutdown (the lane's task has ended): what is still in memory only (the batch being
        written, then the queue) goes to the front of the spool, replayed first at the next start."""
        jobs = ([] if self.batch_spooled else list(self.batch)) + list(self.memory)
        if not jobs:
            return
        pool = self.runner.pool_id
        if self.spool is None:
            log.error("pool %s: %d actions lost at shutdown (no spool)", pool, len(jobs))
            return
        try:
            self.spool.put_first([self.spool_body(job) for job in jobs])
        except OSError as exc:
            log.error("pool %s: %d actions lost at shutdown: the spool cannot write: %s", pool, len(jobs), exc)
            return
        self.memory.clear()
        self.batch = []
        self.runner.spooled(jobs)
        log.info("pool %s: %d unwritten actions spooled for the next start", pool, len(jobs))
