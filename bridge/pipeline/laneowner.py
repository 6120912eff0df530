"""What a lane (bridge/pipeline/lanes.py) needs of the runner of its pool.

A module of its own, not compiled (bridge/extensions.py): mypyc compiles a Protocol declared in
a compiled module as a native trait, and then fails on reading one of its attributes
(mypy 1.20.2: AssertionError in emit_method_call, reading `batch_time` in `Lane._fill`).
Declared here, it is an ordinary Python type to the compiled lanes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from bridge.backend import Job

if TYPE_CHECKING:
    from bridge.rules import Rule


class LaneOwner(Protocol):
    """What a lane needs of the runner of its pool (bridge/pipeline/runner.py): the lane owns its queue and
    its spool; the runner owns writing, the pool's health and the counters."""

    pool_id: str
    batch_size: int
    batch_time: float  # seconds a batch may wait to fill, from its oldest action's arrival
    healthy: bool
    progress: asyncio.Event  # set after every batch

    def rule(self, rule_id: str) -> Rule | None:
        """The loaded rule of a spooled action (None: a reload removed it)."""

    async def commit(self, batch: Sequence[Job], on_stall: Callable[[], None]) -> None:
        """Write a batch, retrying in place; `on_stall` once the pool is found down under it."""

    def spooled(self, jobs: Sequence[Job]) -> None:
        """These jobs are safe on disk: count them, and they are done for the broker's acks."""

    def dropped(self, rule_id: str, why: str, seq: int = 0, log_it: bool = True) -> None:
        """A spooled action will never be written: count it; nobody may wait for it."""
