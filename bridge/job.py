"""One rule to run for one event: what the dispatcher queues, a lane batches and a backend writes.

A class of its own rather than a dataclass, in a compiled module (bridge/extensions.py): one is
built for every message a rule keeps, and the dispatcher, the runner, the lanes and the Redis
functions, all compiled, read it. Compiled, a dataclass keeps the interpreted `__init__` the
dataclasses module generates, and compiled code reads an interpreted object's fields through
generic attribute lookups (docs/benchmarks.md#per-message-objects-built-natively).
Published to backends through bridge/backend.py (and bridge/plugin.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bridge.events import Event
from bridge.render import Values

if TYPE_CHECKING:
    from bridge.rules import Rule


class Job:
    """One rule to run for one event."""

    __slots__ = ("_values", "cursor", "event", "memo", "rule", "seq")

    def __init__(self, rule: Rule, event: Event, seq: int = 0, cursor: str | None = None, memo: Any = None) -> None:
        self.rule = rule
        self.event = event
        self.seq = seq  # submission order across the pool, set by the runner
        self.cursor = cursor  # a paged fetch's continuation: deliver after this msgid
        # What a backend derives once per job so that a retried batch writes the same thing
        # (MongoDB: the event log document's _id).
        self.memo = memo
        self._values: Values | None = None

    @property
    def values(self) -> Values:
        values = self._values
        if values is None:
            values = self._values = Values(self.event)
        return values

    def __repr__(self) -> str:
        return f"Job(rule={self.rule.id!r}, event={self.event!r}, seq={self.seq}, cursor={self.cursor!r})"
