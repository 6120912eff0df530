"""An event sink for tests: records every event a broker source emits and lets a test await one
(`wait_for`), or hold the sink at one (`hold`, back-pressure) until released."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from bridge.events import Event

TIMEOUT = 5.0


def _matches(event: Event, kind: type[Any] | None, fields: dict[str, Any]) -> bool:
    return (kind is None or isinstance(event, kind)) and all(getattr(event, k) == v for k, v in fields.items())


@dataclass
class Hold:
    """The sink stops at a matching event (back-pressure) until released."""

    kind: type[Any] | None
    fields: dict[str, Any]
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.released.set()


class RecordingSink:
    """Records every event; `wait_for` returns the first (or next) one that matches."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._changed = asyncio.Event()
        self._holds: list[Hold] = []

    async def __call__(self, event: Event) -> None:
        for hold in self._holds:
            if not hold.released.is_set() and _matches(event, hold.kind, hold.fields):
                hold.arrived.set()
                await hold.released.wait()
        self.events.append(event)
        self._changed.set()

    def hold(self, kind: type[Any] | None = None, /, **fields: Any) -> Hold:
        """Make the sink block on the next matching event until `release()`."""
        hold = Hold(kind, fields)
        self._holds.append(hold)
        return hold

    def find(self, kind: type[Any] | None = None, /, **fields: Any) -> list[Any]:
        return [e for e in self.events if _matches(e, kind, fields)]

    def kinds(self, clientid: str) -> list[str]:
        """The event type names of one client, in the order the sink got them."""
        return [type(e).__name__ for e in self.events if e.clientid == clientid]

    async def wait_for(
        self, kind: type[Any] | None = None, /, *, count: int = 1, timeout: float = TIMEOUT, **fields: Any
    ) -> Any:
        """Wait until `count` matching events arrived; return the count-th one."""
        async with asyncio.timeout(timeout):
            while True:
                found = self.find(kind, **fields)
                if len(found) >= count:
                    return found[count - 1]
                self._changed.clear()
                await self._changed.wait()
