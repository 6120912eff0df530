"""The last hour of the bridge's throughput, sampled every `api.sample_interval` (default 10 s):
what the dashboard's charts draw (GET /api/v1/stats). A ring buffer: an hour of samples at most,
whatever the uptime.

Each sample: the time, the embedded broker's connections, and PUBLISH packets received and sent
per second since the sample before (the broker's own counters, those of `$SYS/broker/...`); in
mqtt and emqx modes the connections and messages are the external broker's: those are null, and
`events` (hook events the bridge received, per second) is what there is.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

    from bridge.api.host import Host

WINDOW = 3600.0  # seconds of history kept


class History:
    def __init__(self, bridge: Host, interval: float) -> None:
        self.bridge = bridge
        self.interval = interval
        self.samples: deque[dict[str, Any]] = deque(maxlen=math.ceil(WINDOW / interval) + 1)
        self._last: tuple[float, int, int, int] | None = None  # monotonic time and the three totals

    def _totals(self) -> tuple[int | None, int, int, int]:
        core = getattr(self.bridge.broker, "core", None)
        events = sum(self.bridge.metrics.events.values())
        if core is None:
            return None, 0, 0, events
        traffic = core.traffic
        return len(core.active), traffic.publish_received, traffic.publish_sent, events

    def sample(self) -> dict[str, Any]:
        """Take one sample now and keep it."""
        now = time.monotonic()
        connections, received, sent, events = self._totals()
        last, self._last = self._last, (now, received, sent, events)
        entry: dict[str, Any] = {"t": round(time.time(), 3), "connections": connections}
        elapsed = now - last[0] if last is not None else 0.0
        for name, total, index in (("received", received, 1), ("sent", sent, 2), ("events", events, 3)):
            rate = (total - last[index]) / elapsed if last is not None and elapsed > 0 else 0.0
            entry[name] = round(max(rate, 0.0), 3)
        if connections is None:
            entry["received"] = entry["sent"] = None
        self.samples.append(entry)
        return entry

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    async def running(self, _app: web.Application) -> AsyncIterator[None]:
        """aiohttp's cleanup context: sampling while the HTTP listener runs."""
        task = asyncio.get_running_loop().create_task(self._run(), name="api-history")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def describe(self) -> dict[str, Any]:
        return {"interval": self.interval, "window": WINDOW, "samples": list(self.samples)}
