"""Feed events to a bridge the way its broker does."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from bridge.app import Bridge
from bridge.events import Event

# The embedded broker reads packets from its clients' sockets, so it gives the event loop a turn
# between events; a loop that never yields would hold every write back until all events are queued.
YIELD_EVERY = 100


async def feed(bridge: Bridge, events: Sequence[Event]) -> None:
    for index, event in enumerate(events):
        await bridge.dispatcher(event)
        if index % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)
