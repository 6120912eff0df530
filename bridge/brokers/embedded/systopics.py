"""`$SYS/broker/...`: the embedded broker's status as retained messages, in Mosquitto's names.

Every `broker.sys_interval` seconds (0: never) the values below are published, retained, through
the broker's own retain and routing path, so a client sees them as it sees any message: with a
subscription to `$SYS/#` (a first-level wildcard never matches `$` topics) and read permission
from the ACL. Clients may not publish to `$SYS` (bridge/brokers/embedded/access.py); only this
task does. As Mosquitto does, a value is published again only when it changed (uptime and the
loads change at every interval); a late subscriber gets all of them as retained messages.

Names and meanings follow mosquitto(8), BROKER STATUS:

- `messages/received`, `messages/sent`: MQTT packets of any type since the start;
  `publish/messages/received`, `publish/messages/sent`: PUBLISH packets (a QoS 1/2 message
  resent after a reconnect counts again); `bytes/received`, `bytes/sent`;
- `clients/connected`; `clients/disconnected` (sessions kept without a connection);
  `clients/total` (both); `clients/maximum` (most connected at once); `clients/expired`;
- `subscriptions/count` (subscriptions of every session); `retained messages/count` (retained
  messages, the broker's own `$SYS` ones not counted); `store/messages/count` and
  `store/messages/bytes` (messages queued or in flight for sessions);
- `load/{messages,publish,bytes}/{received,sent}/{1min,5min,15min}` and
  `load/connections/{1min,5min,15min}`: per-minute rates, as exponentially weighted moving
  averages over 1, 5 and 15 minutes (Mosquitto's formula);
- `uptime` ("N seconds"), `version` ("hookbridge version X").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bridge.brokers.embedded.broker import Broker

log = logging.getLogger("bridge.brokers.embedded")

PREFIX = "$SYS/broker/"
_WINDOWS = (("1min", 60.0), ("5min", 300.0), ("15min", 900.0))
# load/<name> and the Traffic counter (or broker counter) each is the rate of
_LOADS = (
    ("messages/received", "packets_received"),
    ("messages/sent", "packets_sent"),
    ("publish/received", "publish_received"),
    ("publish/sent", "publish_sent"),
    ("bytes/received", "bytes_received"),
    ("bytes/sent", "bytes_sent"),
    ("connections", "connections"),
)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("hookbridge")
    except PackageNotFoundError:
        return "unknown"


class SysTopics:
    """The periodic task that publishes `$SYS/broker/...` for one broker."""

    def __init__(self, broker: Broker, interval: float) -> None:
        self.broker = broker
        self.interval = interval
        self.started = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._published: dict[str, str] = {}  # topic -> the value last published
        self._loads: dict[str, float] = {}  # load topic -> its current average
        self._last_counts: dict[str, int] = {}
        self._last_time = self.started

    def start(self) -> None:
        if self.interval > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sys-topics")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            try:
                await self.publish()
            except Exception:  # one failed round must not end the task
                log.exception("publishing the $SYS topics failed")
            await asyncio.sleep(self.interval)

    def values(self, now: float | None = None) -> dict[str, str]:
        """Every `$SYS/broker/...` topic and its value now (loads updated since the last call)."""
        broker, traffic = self.broker, self.broker.traffic
        now = time.monotonic() if now is None else now
        connected = disconnected = subscriptions = stored = stored_bytes = dropped = 0
        for state in broker.states.values():
            if state.connected:
                connected += 1
            else:
                disconnected += 1
            subscriptions += len(state.subscriptions)
            dropped += state.dropped
            stored += len(state.outbox) + len(state.inflight)
            stored_bytes += state.outbox_bytes + sum(len(m.payload) for m in state.inflight.values())
        traffic.clients_maximum = max(traffic.clients_maximum, connected)
        retained = broker.router.retained
        own = len(retained.matching(PREFIX.rstrip("/") + "/#")) if retained else 0
        values = {
            "version": f"hookbridge version {version()}",
            "uptime": f"{int(now - self.started)} seconds",
            "clients/connected": str(connected),
            "clients/active": str(connected),  # Mosquitto's older name
            "clients/disconnected": str(disconnected),
            "clients/inactive": str(disconnected),  # Mosquitto's older name
            "clients/total": str(connected + disconnected),
            "clients/maximum": str(traffic.clients_maximum),
            "clients/expired": str(traffic.clients_expired),
            "messages/received": str(traffic.packets_received),
            "messages/sent": str(traffic.packets_sent),
            "publish/messages/received": str(traffic.publish_received),
            "publish/messages/sent": str(traffic.publish_sent),
            "publish/messages/dropped": str(broker.dropped_by_ended_sessions + dropped),
            "bytes/received": str(traffic.bytes_received),
            "bytes/sent": str(traffic.bytes_sent),
            "subscriptions/count": str(subscriptions),
            "retained messages/count": str(len(retained) - own),
            "store/messages/count": str(stored),
            "store/messages/bytes": str(stored_bytes),
        }
        values.update(self._load(now))
        return {PREFIX + name: value for name, value in values.items()}

    def _load(self, now: float) -> dict[str, str]:
        """Mosquitto's loads: the per-minute rate over the last interval, folded into a moving
        average per window (new = rate + e^(-dt/window) * (old - rate)); all start at 0."""
        traffic = self.broker.traffic
        elapsed = now - self._last_time
        out: dict[str, str] = {}
        for name, counter in _LOADS:
            count = getattr(traffic, counter)
            previous = self._last_counts.get(counter, 0)
            self._last_counts[counter] = count
            rate = (count - previous) * 60.0 / elapsed if elapsed > 0 else 0.0
            for window, seconds in _WINDOWS:
                topic = f"load/{name}/{window}"
                old = self._loads.get(topic, 0.0)
                new = rate + math.exp(-elapsed / seconds) * (old - rate) if elapsed > 0 else old
                self._loads[topic] = new
                out[topic] = f"{new:.2f}"
        self._last_time = now
        return out

    async def publish(self) -> int:
        """Publish what changed since the last round (every topic the first time), retained, QoS 0.
        Returns how many were published."""
        from bridge.brokers.embedded.router import Message

        broker = self.broker
        changed = [(t, v) for t, v in self.values().items() if self._published.get(t) != v]
        router = broker.router
        for topic, value in changed:
            message = Message(broker.msgids.next(), topic, value.encode(), 0, True, "")
            # as any retained publish: stored in the step its id is made, then routed in id order
            router.store_retained(message, durable=False)  # made again at every start
            ticket = router.sequencer.enter()
            try:
                if not router.sequencer.ready(ticket):
                    await router.sequencer.wait(ticket)
                router.route(message)
            finally:
                router.sequencer.leave(ticket)
            self._published[topic] = value
        return len(changed)
