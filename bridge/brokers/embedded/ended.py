"""`Ended`: set once a connection's teardown is over (broker.teardown); what a takeover, a kick
or a stop waits on."""

from __future__ import annotations

import asyncio


class Ended:
    """Set once a connection's teardown is over; what a takeover or a stop waits on.

    An asyncio.Event made only when someone waits: its waiter deque is about 600 bytes, and a
    fleet's connections are mostly never waited on (docs/benchmarks.md#fleet-scale: 3 KB per idle connection)."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None
        self._set = False

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            return
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()
