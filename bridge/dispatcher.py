"""The sink every broker source feeds: event -> matching rules -> the pools' runners."""

from __future__ import annotations

import asyncio

from bridge.backend import Job
from bridge.engine import Engine
from bridge.events import Event, Hookpoint
from bridge.metrics import Metrics
from bridge.pager import FetchPager
from bridge.runner import Runner


class Dispatcher:
    def __init__(self, engine: Engine, runners: dict[str, Runner], metrics: Metrics) -> None:
        self.engine = engine
        self.runners = runners
        self.metrics = metrics
        self.pager = FetchPager(self.resubmit)
        # Every broker mode acks a message only once all its jobs are done (SPEC 6.3): with
        # `track_commits`, each call returns a future for that. Off only for sources that
        # need no such future per event (tests of a source alone).
        self.track_commits = False
        self._receipts: dict[int, _Receipt] = {}  # id(job) -> the receipt of its event

    async def __call__(self, event: Event) -> asyncio.Future[None] | None:
        self.metrics.events[event.hookpoint] += 1
        self.pager.observe(event)
        rules = self.engine.match(event)
        if not self.track_commits or not rules:
            for rule in rules:
                await self.runners[rule.pool].submit(Job(rule, event))
            return None
        receipt = _Receipt(len(rules))
        for rule in rules:
            job = Job(rule, event)
            self._receipts[id(job)] = receipt
            await self.runners[rule.pool].submit(job)
        return receipt.done

    def wants(self, hookpoint: Hookpoint, clientid: str, topic: str | None = None) -> bool:
        """Whether an event of `hookpoint` for `clientid` would do anything here (a rule takes
        it (for `topic` when given), or a fetch page waits for that client's acks). A broker may
        skip building an event
        that nothing wants (message.delivered and message.acked come once per message and
        receiver); it is still counted."""
        if self.engine.takes(hookpoint, topic) or self.pager.waits_for(clientid):
            return True
        self.metrics.events[hookpoint] += 1
        return False

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
    """Counts the jobs of one event still to be done; `done` resolves when none are left."""

    __slots__ = ("done", "left")

    def __init__(self, jobs: int) -> None:
        self.left = jobs
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def job_done(self) -> None:
        self.left -= 1
        if self.left == 0 and not self.done.done():
            self.done.set_result(None)
