"""One runner per pool: queueing, batching, in-flight window, retries, ordering, counters.

Jobs are spread over `max_inflight` lanes by an ordering key, so all jobs of
one (publisher, topic), and all of one subscriber, go through the same lane in
arrival order, while different keys are written concurrently. A lane writes
one batch at a time and retries it in place (exponential backoff) on
recoverable errors, so nothing behind it overtakes. Each lane's queue is
bounded; a full queue makes `submit` wait (policy `block`), which is how
back-pressure reaches the broker. The spool (SPEC 7) goes behind these queues.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Sequence

from actions.base import Backend, Job
from bridge.conf.config import PoolConfig
from bridge.events import Hookpoint, MessagePublish
from bridge.metrics import Metrics

log = logging.getLogger(__name__)

CommitHook = Callable[[Job, BaseException | None], None]

# Set while a lane writes a batch. Events caused by that batch (a proxy
# subscription's session.subscribed, a fetch page's follow-up) are queued past
# the bound: waiting for room in a lane that is waiting for us would deadlock.
_INSIDE_COMMIT = contextvars.ContextVar("inside_commit", default=False)


def ordering_key(job: Job) -> str:
    event = job.event
    if isinstance(event, MessagePublish):
        return f"{event.clientid}\x00{event.topic}"
    return event.clientid  # session, client, delivered and acked events: per client


class _Lane:
    def __init__(self, runner: Runner, index: int, capacity: int) -> None:
        self.runner = runner
        self.index = index
        self.capacity = capacity
        self.queue: asyncio.Queue[Job] = asyncio.Queue()  # bounded by `put`, see _INSIDE_COMMIT
        self.room = asyncio.Event()
        self.busy = False
        self.current: frozenset[int] = frozenset()  # seqs of the batch being written

    async def run(self) -> None:
        runner = self.runner
        while True:
            first = await self.queue.get()
            batch = [first]
            self._drain(batch)
            if len(batch) < runner.batch_size and runner.batch_time > 0 and self.queue.empty():
                await asyncio.sleep(runner.batch_time)
                self._drain(batch)
            self.room.set()
            self.busy = True
            self.current = frozenset(job.seq for job in batch)
            token = _INSIDE_COMMIT.set(True)
            try:
                await runner.commit(batch)
            finally:
                _INSIDE_COMMIT.reset(token)
                self.busy = False
                self.current = frozenset()
                for _ in batch:
                    self.queue.task_done()

    async def put(self, job: Job) -> None:
        while self.queue.qsize() >= self.capacity and not _INSIDE_COMMIT.get():
            self.room.clear()
            await self.room.wait()
        self.queue.put_nowait(job)

    def _drain(self, batch: list[Job]) -> None:
        limit = self.runner.batch_size
        while len(batch) < limit:
            try:
                batch.append(self.queue.get_nowait())
            except asyncio.QueueEmpty:
                return


class Runner:
    def __init__(self, pool: PoolConfig, backend: Backend, metrics: Metrics) -> None:
        self.pool_id = pool.id
        self.backend = backend
        self.metrics = metrics
        self.batch_size = max(1, int(pool["batch_size"]))
        self.batch_time = float(pool["batch_time"])
        self.backoff_max = float(pool["retry_backoff_max"])
        self.trim_interval = float(pool["trim_interval"])
        lanes = max(1, int(pool["max_inflight"]))
        capacity = max(1, int(pool["queue_size"]) // lanes)
        self._lanes = [_Lane(self, i, capacity) for i in range(lanes)]
        self._tasks: list[asyncio.Task[None]] = []
        self._seq = 0
        self._pending_publishes: set[int] = set()
        self._publishes_changed = asyncio.Condition()
        self.commit_hooks: list[CommitHook] = []
        self.healthy = True
        self.last_error: str = ""
        metrics.write_latency[self.pool_id]

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        for lane in self._lanes:
            self._tasks.append(asyncio.create_task(lane.run(), name=f"runner:{self.pool_id}:{lane.index}"))
        self._tasks.append(asyncio.create_task(self._maintenance(), name=f"maintenance:{self.pool_id}"))

    async def stop(self, drain_timeout: float = 10.0) -> None:
        """Write what is queued (up to `drain_timeout`), then stop the lanes."""
        try:
            await asyncio.wait_for(self.idle(), drain_timeout)
        except TimeoutError:
            log.warning("pool %s: %d actions not written before shutdown", self.pool_id, self.depth)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    # -- intake --------------------------------------------------------------

    async def submit(self, job: Job) -> None:
        """Queue a job; waits while its lane is full (back-pressure)."""
        self._seq += 1
        job.seq = self._seq
        if job.event.hookpoint is Hookpoint.MESSAGE_PUBLISH:
            self._pending_publishes.add(job.seq)
        self.metrics.count(job.rule.id, "matched")
        # hash() of a str is stable within a process, which is all ordering needs, and spreads
        # keys evenly (crc32 left two of four lanes with three quarters of 100 topics).
        lane = self._lanes[hash(ordering_key(job)) % len(self._lanes)]
        await lane.put(job)

    @property
    def depth(self) -> int:
        return sum(lane.queue.qsize() for lane in self._lanes)

    @property
    def quiet(self) -> bool:
        """Nothing queued and nothing being written."""
        return all(lane.queue.empty() and not lane.busy for lane in self._lanes)

    async def idle(self) -> None:
        """Return once every queued job has been committed or failed."""
        while True:
            await asyncio.gather(*(lane.queue.join() for lane in self._lanes))
            if all(lane.queue.empty() and not lane.busy for lane in self._lanes):
                return

    async def publishes_committed(self, seq: int) -> None:
        """Wait until every message.publish job submitted before `seq` is done.

        Publishes earlier in the waiter's own batch count as done: a backend
        runs a batch in order and flushes writes before any read.
        """
        own = next((lane.current for lane in self._lanes if seq in lane.current), frozenset())

        def done() -> bool:
            return all(pending > seq or pending in own for pending in self._pending_publishes)

        async with self._publishes_changed:
            await self._publishes_changed.wait_for(done)

    # -- writing -------------------------------------------------------------

    async def commit(self, batch: Sequence[Job]) -> None:
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                outcomes = await self.backend.execute(batch)
            except Exception as exc:
                if not self.backend.is_recoverable(exc):
                    log.error("pool %s: batch of %d failed: %s", self.pool_id, len(batch), exc)
                    outcomes = [exc] * len(batch)
                else:
                    attempt += 1
                    self._mark_down(exc, attempt)
                    for job in batch:
                        self.metrics.count(job.rule.id, "retried")
                    await asyncio.sleep(min(self.backoff_max, 0.05 * 2 ** min(attempt, 10)))
                    continue
            self.metrics.write_latency[self.pool_id].observe(time.perf_counter() - started)
            break
        if not self.healthy:
            log.info("pool %s: writing again after %d retries", self.pool_id, attempt)
        self.healthy, self.last_error = True, ""
        await self._finish(batch, outcomes)

    def _mark_down(self, exc: BaseException, attempt: int) -> None:
        if self.healthy:
            log.warning("pool %s: database unavailable, retrying: %s", self.pool_id, exc)
        self.healthy, self.last_error = False, str(exc) or type(exc).__name__

    async def _finish(self, batch: Sequence[Job], outcomes: Sequence[BaseException | None]) -> None:
        published = False
        for job, outcome in zip(batch, outcomes, strict=True):
            if outcome is None:
                self.metrics.count(job.rule.id, "succeeded")
            else:
                self.metrics.count(job.rule.id, "failed")
                log.warning("rule %s (%s): %s", job.rule.id, job.rule.where, outcome)
            if job.seq in self._pending_publishes:
                self._pending_publishes.discard(job.seq)
                published = True
            for hook in self.commit_hooks:
                hook(job, outcome)
        if published:
            async with self._publishes_changed:
                self._publishes_changed.notify_all()

    async def _maintenance(self) -> None:
        while True:
            await asyncio.sleep(self.trim_interval)
            try:
                await self.backend.maintenance()
            except Exception as exc:  # maintenance is best effort; the next round retries
                log.warning("pool %s: maintenance failed: %s", self.pool_id, exc)
