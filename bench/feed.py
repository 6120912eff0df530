"""The benchmarks' events, and feeding them to a bridge the way its broker does."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence

from bridge.app import Bridge
from bridge.events import Event, MessagePublish
from bridge.msgid import MsgIdGenerator

# The embedded broker reads packets from its clients' sockets, so it gives the event loop a turn
# between events; a loop that never yields would hold every write back until all events are queued.
YIELD_EVERY = 100


async def feed(bridge: Bridge, events: Sequence[Event]) -> None:
    for index, event in enumerate(events):
        await bridge.dispatcher(event)
        if index % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)


def make_events(count: int, payload_size: int, topics: int = 100) -> list[MessagePublish]:
    """QoS 1 publishes from `topics` devices, each on its own topic, one payload for all."""
    ids = MsgIdGenerator("bench")
    payload = os.urandom(payload_size)
    now = time.time()
    return [
        MessagePublish(
            msgid=ids.next(),
            clientid=f"dev{n % topics}",
            username=None,
            topic=f"bench/dev{n % topics}",
            qos=1,
            payload=payload,
            retain=False,
            node="bench",
            peername="127.0.0.1:1",
            timestamp=now,
        )
        for n in range(count)
    ]
