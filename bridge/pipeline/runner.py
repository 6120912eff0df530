"""One runner per pool: queueing, batching, in-flight window, retries, ordering, counters.

Jobs are spread over `max_inflight` lanes by an ordering key, so all jobs of
one (publisher, topic), and all of one subscriber, go through the same lane in
arrival order, while different keys are written concurrently. A lane writes
one batch at a time and retries it in place (exponential backoff) on
recoverable errors, so nothing behind it overtakes. Each lane's queue is
bounded; a full queue makes `submit` wait (policy `block`), which is how
back-pressure reaches the broker. Behind each memory queue is the lane's on-disk
spool (bridge/pipeline/spool/), used while the pool is down or the queue is full.

A pool is down from its first failed batch, from the moment a batch has gone
`request_timeout` without an answer (a stalled server looks like no error at all), or,
while it has nothing to write, from a probe (`Backend.probe`, every half `request_timeout`)
that failed or got no answer within half `request_timeout`:
its lanes then spill to the spool, so the broker's acknowledgements, which wait for
"committed or spooled", keep coming while the database is stalled.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from bridge.backend import Backend, Job
from bridge.conf.config import PoolConfig
from bridge.events import Event, Hookpoint, ordering_key
from bridge.ops.metrics import Metrics
from bridge.pipeline.lanes import Lane
from bridge.pipeline.spool import Budget, PoolSpool

if TYPE_CHECKING:
    from bridge.rules import Rule

log = logging.getLogger(__name__)

# Called once a job no longer needs memory to survive: written (outcome None), failed for good
# (the exception), or written to the spool (None; it is written later, from disk, as a new job).
# External broker modes acknowledge a message to the broker when all of its jobs got here.
CommitHook = Callable[[Job, BaseException | None], None]
# Called for a job that failed for good, before the commit hooks (the dead letters keep it).
FailureHook = Callable[[Job, BaseException], None]


def lane_index(event: Event, lanes: int) -> int:
    """The lane of an event: stable across processes (spooled actions keep their lane after a
    restart), and spread evenly: crc32 alone is linear, so similar keys share low bits; the
    Fibonacci multiplication mixes every bit into the high ones used here."""
    key = ordering_key(event)
    try:  # strict UTF-8 is the same bytes without a lone surrogate, and spares a codec lookup
        data = key.encode()
    except UnicodeEncodeError:
        data = key.encode("utf-8", "surrogatepass")
    mixed = (zlib.crc32(data) * 0x9E3779B97F4A7C15) >> 32
    return (mixed & 0xFFFFFFFF) % lanes


# Compiled (bridge/extensions.py); the tests replace it with a recording subclass of their own.
@mypyc_attr(allow_interpreted_subclasses=True)
class Backoff:
    """The pause before retry `attempt` (1, 2, ...) of a batch: doubling from `first`, at most `cap`."""

    def __init__(self, first: float, cap: float) -> None:
        self.first = first
        self.cap = cap

    def delay(self, attempt: int) -> float:
        return min(self.cap, self.first * 2.0 ** min(attempt - 1, 32))


class Runner:
    def __init__(
        self,
        pool: PoolConfig,
        backend: Backend,
        metrics: Metrics,
        spool_dir: Path | None = None,
        budget: Budget | None = None,
    ) -> None:
        self.pool_id = pool.id
        self.backend = backend
        self.metrics = metrics
        self.batch_size = max(1, int(pool["batch_size"]))
        self.batch_time = float(pool["batch_time"])
        self.backoff = Backoff(0.1, float(pool["retry_backoff_max"]))
        self.request_timeout = float(pool["request_timeout"])
        self.trim_interval = float(pool["trim_interval"])
        lanes = max(1, int(pool["max_inflight"]))
        capacity = max(1, int(pool["queue_size"]) // lanes)
        # Without a spool directory (tests of the runner alone) actions wait in memory only.
        self.spool = PoolSpool(spool_dir, pool.id, lanes, budget, self.spool_problem) if spool_dir and budget else None
        spool = self.spool
        self._lanes = [Lane(self, i, capacity, spool.lanes[i] if spool else None) for i in range(lanes)]
        self.rules: dict[str, Rule] = {}  # by id: spooled actions find their rule again
        self.progress = asyncio.Event()  # set after every batch
        self._tasks: list[asyncio.Task[None]] = []
        self._seq = 0
        self._pending_publishes: set[int] = set()
        self._publishes_changed = asyncio.Condition()
        self.commit_hooks: list[CommitHook] = []
        self.failure_hooks: list[FailureHook] = []  # apart: none is called per written job
        self.healthy = True
        self.last_error: str = ""
        self._down_by_probe = False  # down since a probe failed (not a batch): a probe may say up
        metrics.write_latency[self.pool_id]

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        if self.spool is not None:
            lanes = len(self._lanes)
            self.spool.open(lambda record: lane_index(record.event, lanes))
            if self.spool.pending:
                log.info("pool %s: %d spooled actions to replay", self.pool_id, self.spool.pending)
        for lane in self._lanes:
            self._tasks.append(asyncio.create_task(lane.run(), name=f"runner:{self.pool_id}:{lane.index}"))
        self._tasks.append(asyncio.create_task(self._maintenance(), name=f"maintenance:{self.pool_id}"))
        self._tasks.append(asyncio.create_task(self._probing(), name=f"probe:{self.pool_id}"))

    async def stop(self, drain_timeout: float = 10.0) -> None:
        """Write what is queued (up to `drain_timeout`), stop the lanes, spool what is left."""
        try:
            await asyncio.wait_for(self.idle(), drain_timeout)
        except TimeoutError:
            log.warning("pool %s: %d actions not written before shutdown", self.pool_id, self.depth)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for lane in self._lanes:
            lane.spool_leftovers()
        if self.spool is not None:
            self.spool.close()

    # -- intake --------------------------------------------------------------

    async def submit(self, job: Job) -> None:
        """Queue a job; waits while its lane is full (back-pressure)."""
        self._seq += 1
        job.seq = self._seq
        if job.event.hookpoint is Hookpoint.MESSAGE_PUBLISH:
            self._pending_publishes.add(job.seq)
        self.metrics.count(job.rule.id, "matched")
        await self._lanes[lane_index(job.event, len(self._lanes))].put(job)

    @property
    def depth(self) -> int:
        """Actions waiting, in memory and spooled."""
        return sum(lane.depth for lane in self._lanes)

    @property
    def quiet(self) -> bool:
        """Nothing queued, spooled or being written."""
        return all(lane.quiet for lane in self._lanes)

    async def idle(self) -> None:
        """Return once every queued (and spooled) job has been committed or failed."""
        while True:
            self.progress.clear()
            if self.quiet:
                return
            await self.progress.wait()

    async def publishes_committed(self, seq: int) -> None:
        """Wait until every message.publish job submitted before `seq` is done.

        The waiter is a read in a lane's batch, and the jobs before it in that batch are
        committed by now: a backend writes them, in a transaction of its own, before it runs a
        read (bridge/batches.py). They count as done from now on, for every waiter, not only for
        this one: counted only once the whole batch ended, a read in each of two lanes could wait
        for a publish the other lane had written before its own read, and neither batch ever ended
        (the soak test's deadlock, tests/integration/test_soak.py).
        """
        self._written_before(seq)

        def done() -> bool:
            return all(pending > seq for pending in self._pending_publishes)

        async with self._publishes_changed:
            await self._publishes_changed.wait_for(done)

    def _written_before(self, seq: int) -> None:
        """The publishes before job `seq` in its lane's batch are written: no longer pending."""
        lane = next((lane for lane in self._lanes if seq in lane.current), None)
        if lane is None:
            return
        written = False
        for job in lane.batch:
            if job.seq == seq:
                break
            if job.seq in self._pending_publishes:
                self._pending_publishes.discard(job.seq)
                written = True
        if written:
            asyncio.get_running_loop().create_task(self._notify_publishes())

    # -- what the lanes report (bridge/pipeline/lanes.py LaneOwner) -------------------

    @property
    def spool_error(self) -> str:
        """Why the pool's spool cannot write (disk full), while it cannot; "" when it can."""
        return next((lane.spool_error for lane in self._lanes if lane.spool_error), "")

    def rule(self, rule_id: str) -> Rule | None:
        return self.rules.get(rule_id)

    def spooled(self, jobs: Sequence[Job]) -> None:
        """Jobs now safe on disk: for the commit hooks, they are done."""
        for job in jobs:
            self.metrics.count(job.rule.id, "spooled")
            for hook in self.commit_hooks:
                hook(job, None)

    def spool_problem(self, message: str) -> None:
        log.error("pool %s: %s", self.pool_id, message)
        self.metrics.spool_problems[self.pool_id] += 1

    def dropped(self, rule_id: str, why: str, seq: int = 0, log_it: bool = True) -> None:
        self.metrics.count(rule_id, "dropped")
        if log_it:
            log.warning("pool %s: spooled action of rule %s dropped: %s", self.pool_id, rule_id, why)
        if seq in self._pending_publishes:  # a fetch waiting for this publish must not wait forever
            self._pending_publishes.discard(seq)
            asyncio.get_running_loop().create_task(self._notify_publishes())

    async def _notify_publishes(self) -> None:
        async with self._publishes_changed:
            self._publishes_changed.notify_all()

    # -- writing -------------------------------------------------------------

    async def commit(self, batch: Sequence[Job], on_stall: Callable[[], None] = lambda: None) -> None:
        """Write a batch, retrying in place until it is written or fails for good; `on_stall` is
        called when the pool is found down under it (the lane then spills its actions to disk)."""
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                outcomes = await self._execute(batch, on_stall)
            except Exception as exc:
                if not self.backend.is_recoverable(exc):
                    log.error("pool %s: batch of %d failed: %s", self.pool_id, len(batch), exc)
                    outcomes = [exc] * len(batch)
                else:
                    attempt += 1
                    self._mark_down(exc, attempt)
                    if attempt == 1:
                        on_stall()  # from now on the lane's actions wait on disk, not in memory
                    for job in batch:
                        self.metrics.count(job.rule.id, "retried")
                    await asyncio.sleep(self.backoff.delay(attempt))
                    continue
            self.metrics.write_latency[self.pool_id].observe(time.perf_counter() - started)
            break
        if not self.healthy:
            log.info("pool %s: writing again after %d retries", self.pool_id, attempt)
        self.healthy, self.last_error, self._down_by_probe = True, "", False
        await self._finish(batch, outcomes)

    async def _execute(self, batch: Sequence[Job], on_stall: Callable[[], None]) -> list[BaseException | None]:
        """The backend writes the batch. Without an answer within `request_timeout` the pool is
        stalled: down from then on, the lane's actions go to disk, while the batch still waits for
        its answer or its error (a driver times out its own requests)."""
        task = asyncio.ensure_future(self.backend.execute(batch))
        try:
            done, _ = await asyncio.wait({task}, timeout=self.request_timeout)
            if not done:
                self._mark_down(TimeoutError(f"no answer within {self.request_timeout:g} s (request_timeout)"), 0)
                on_stall()
            return await task
        finally:
            if not task.done():  # this lane was cancelled (shutdown): so is its request
                task.cancel()

    def _mark_down(self, exc: BaseException, attempt: int) -> None:
        if self.healthy:
            log.warning("pool %s: database unavailable, retrying: %s", self.pool_id, exc)
        self.healthy, self.last_error = False, str(exc) or type(exc).__name__

    async def _finish(self, batch: Sequence[Job], outcomes: Sequence[BaseException | None]) -> None:
        published = False
        pending, hooks = self._pending_publishes, self.commit_hooks
        succeeded: dict[str, int] = {}  # by rule: counted once per batch, not per job
        for job, outcome in zip(batch, outcomes, strict=True):
            if outcome is None:
                rule_id = job.rule.id
                succeeded[rule_id] = succeeded.get(rule_id, 0) + 1
            else:
                self.metrics.count(job.rule.id, "failed")
                log.warning("rule %s (%s): %s", job.rule.id, job.rule.where, outcome)
                for failed in self.failure_hooks:
                    failed(job, outcome)
            seq = job.seq
            if seq in pending:
                pending.discard(seq)
                published = True
            for hook in hooks:
                hook(job, outcome)
        for rule_id, count in succeeded.items():
            self.metrics.count(rule_id, "succeeded", count)
        if published:
            async with self._publishes_changed:
                self._publishes_changed.notify_all()

    async def _probing(self) -> None:
        """While the pool is idle, ask the database every half `request_timeout` whether it answers:
        a stall is seen within `request_timeout` (half to start the probe, half for its answer).
        A probe left without an answer is not cancelled (a driver cancelled mid-request can leave
        its connection unusable) and no second one starts before it ends."""
        interval = self.request_timeout / 2
        probe: asyncio.Future[None] | None = None
        while True:
            await asyncio.sleep(interval)
            if probe is None or probe.done():
                if not self.quiet:
                    probe = None  # the batches tell the pool's state
                    continue
                probe = asyncio.ensure_future(self.backend.probe())
            done, _ = await asyncio.wait({probe}, timeout=interval)
            if not done:
                self._probe_failed(TimeoutError(f"no answer to a probe within {interval:g} s"))
            elif probe.cancelled() or probe.exception() is not None:
                self._probe_failed(probe.exception() or TimeoutError("probe cancelled"))
            elif not self.healthy and self._down_by_probe and self.quiet:
                log.info("pool %s: answering again", self.pool_id)
                self.healthy, self.last_error, self._down_by_probe = True, "", False

    def _probe_failed(self, exc: BaseException) -> None:
        if self.healthy:
            self._down_by_probe = True
        self._mark_down(exc, 0)

    async def _maintenance(self) -> None:
        while True:
            await asyncio.sleep(self.trim_interval)
            try:
                await self.backend.maintenance()
            except Exception as exc:  # maintenance is best effort; the next round retries
                log.warning("pool %s: maintenance failed: %s", self.pool_id, exc)
