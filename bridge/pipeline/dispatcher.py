"""The sink every broker source feeds: event -> matching rules -> the pools' runners."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from bridge.backend import Job
from bridge.events import Event, Hookpoint
from bridge.ops.metrics import Metrics
from bridge.pipeline.engine import Engine
from bridge.pipeline.pager import FetchPager
from bridge.pipeline.runner import Runner


class Dispatcher:
    def __init__(self, engine: Engine, runners: dict[str, Runner], metrics: Metrics) -> None:
        self.engine = engine
        self.runners = runners
        self.metrics = metrics
        self.pager = FetchPager(self.resubmit)
        # Every broker mode acks a message only once all its jobs are done
        # (docs/architecture.md#acknowledged-means-kept): with
        # `track_commits`, each call returns a future for that. Off only for sources that
        # need no such future per event (tests of a source alone).
        self.track_commits = False
        self._receipts: dict[int, _Receipt] = {}  # id(job) -> the receipt of its event

    async def __call__(self, event: Event) -> asyncio.Future[None] | None:
        if not self.track_commits:
            await self.dispatch(event, None)
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def committed() -> None:
            if not future.done():
                future.set_result(None)

        return future if await self.dispatch(event, committed) else None

    async def dispatch(self, event: Event, on_committed: Callable[[], None] | None) -> bool:
        """Submit the jobs of `event`; `on_committed` is called (from a runner's commit) once every
        one of them is done. False: no rule matched, `on_committed` will not be called.

        The callback form is the external modes' hot path (no future, no loop turn per message);
        `__call__` wraps it in a future for the sources that await one."""
        self.metrics.events[event.hookpoint] += 1
        self.pager.observe(event)
        rules = self.engine.match(event)
        if not rules:
            return False
        if on_committed is None:
            for rule in rules:
                await self.runners[rule.pool].submit(Job(rule, event))
            return True
        receipt = _Receipt(len(rules), on_committed)
        receipts = self._receipts
        for rule in rules:
            job = Job(rule, event)
            receipts[id(job)] = receipt
            await self.runners[rule.pool].submit(job)
        return True

    def wants(self, hookpoint: Hookpoint, clientid: str, topic: str | None = None) -> bool:
        """Whether an event of `hookpoint` for `clientid` would do anything here (a rule takes
        it (for `topic` when given), or a fetch page waits for that client's acks). A pure
        question: a broker may skip building an event that nothing wants (message.delivered and
        message.acked come once per message and receiver), and then tells `skipped`."""
        return self.engine.takes(hookpoint, topic) or self.pager.waits_for(clientid)

    def skipped(self, hookpoint: Hookpoint) -> None:
        """An event a broker did not build because nothing `wants` it: counted as if it had come
        (the events counter of /metrics counts every event, wanted or not)."""
        self.metrics.events[hookpoint] += 1

    def job_done(self, job: Job, outcome: BaseException | None) -> None:
        """A runner commit hook: `job` is committed, or failed for good (counted there), or safely
        spooled. Either way the event no longer waits for it. Calling it twice is harmless."""
        receipt = self._receipts.pop(id(job), None)
        if receipt is not None:
            receipt.job_done()

    async def resubmit(self, job: Job) -> None:
        """A follow-up job (next fetch page), if its rule is still loaded."""
        if job.rule in self.engine.rules:
            await self.runners[job.rule.pool].submit(job)

    def swap(self, engine: Engine) -> None:
        """Use new rules from the next event on (SIGHUP reload)."""
        self.engine = engine


class _Receipt:
    """Counts the jobs of one event still to be done; calls `on_done` when none are left."""

    __slots__ = ("left", "on_done")

    def __init__(self, jobs: int, on_done: Callable[[], None]) -> None:
        self.left = jobs
        self.on_done = on_done

    def job_done(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.on_done()
