"""The sink every broker source feeds: event -> matching rules -> the pools' runners."""

from __future__ import annotations

from actions.base import Job
from bridge.engine import Engine
from bridge.events import Event
from bridge.metrics import Metrics
from bridge.pager import FetchPager
from bridge.runner import Runner


class Dispatcher:
    def __init__(self, engine: Engine, runners: dict[str, Runner], metrics: Metrics) -> None:
        self.engine = engine
        self.runners = runners
        self.metrics = metrics
        self.pager = FetchPager(self.resubmit)

    async def __call__(self, event: Event) -> None:
        self.metrics.events[event.hookpoint] += 1
        self.pager.observe(event)
        for rule in self.engine.match(event):
            await self.runners[rule.pool].submit(Job(rule, event))

    async def resubmit(self, job: Job) -> None:
        """A follow-up job (next fetch page), if its rule is still loaded."""
        if job.rule in self.engine.rules:
            await self.runners[job.rule.pool].submit(job)

    def swap(self, engine: Engine) -> None:
        """Use new rules from the next event on (SIGHUP reload)."""
        self.engine = engine
