"""`$SYS/broker/...`: the embedded broker's status as retained messages, in Mosquitto's names.

Every `broker.sys_interval` seconds (0: never) the values below are published, retained, through
the broker's own retain and routing path, so a client sees them as it sees any message: with a
subscription to `$SYS/#` (a first-level wildcard never matches `$` topics) and read permission
from the ACL. Clients may not publish to `$SYS` (bridge/brokers/embedded/access.py); only this
task does. As Mosquitto does, a value is published again only when it changed (uptime and the
loads change at every interval); a late subscriber gets all of them as retained messages.

The topics are the 53 Mosquitto 2.0.11 publishes (src/sys_tree.c), with its meanings: the
numbers come from census.py (traffic.py says what each counter counts); docs/operations.md has the
table and the few differences (version, uptime, heap). What only hookbridge has (pools, spool,
rules) is under `$SYS/broker/hookbridge/`, from the bridge (BrokerSource.report_bridge_status).
The loads are Mosquitto's: per-minute rates over the last interval folded into exponentially
weighted moving averages over 1, 5 and 15 minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from bridge.brokers.base import BrokerNumbers
from bridge.brokers.embedded.traffic import QUEUE_DROP_REASONS

if TYPE_CHECKING:
    from bridge.brokers.embedded.broker import Broker
    from bridge.brokers.embedded.census import Census

log = logging.getLogger("bridge.brokers.embedded")

PREFIX = "$SYS/broker/"
OWN_PREFIX = PREFIX + "hookbridge/"  # what Mosquitto does not have
_WINDOWS = (("1min", 60.0), ("5min", 300.0), ("15min", 900.0))
# load/<name>: the rate of which number of BrokerNumbers (publish/dropped: a sum, see _counters)
_LOADS = (
    ("messages/received", "packets_received"),
    ("messages/sent", "packets_sent"),
    ("publish/dropped", "publish_dropped"),
    ("publish/received", "publish_received"),
    ("publish/sent", "publish_sent"),
    ("bytes/received", "bytes_received"),
    ("bytes/sent", "bytes_sent"),
    ("sockets", "sockets"),
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

    def __init__(self, broker: Broker, interval: float, census: Census) -> None:
        self.broker = broker
        self.census = census
        self.interval = interval
        self.started = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._published: dict[str, str] = {}  # topic -> the value last published
        self._loads: dict[str, float] = {}  # load topic -> its current average
        self._last_counts: dict[str, int] = {}
        self._last_time = self.started
        # The bridge's own status (pools, spool, rules) published under OWN_PREFIX; None: none
        self.bridge_status: Callable[[], Mapping[str, str]] | None = None

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

    def values(self, now: float | None = None, numbers: BrokerNumbers | None = None) -> dict[str, str]:
        """Every `$SYS/broker/...` topic and its value now (loads updated since the last call);
        `numbers`: the broker's, when the caller has them (else the census's, census.py)."""
        numbers = self.census.numbers() if numbers is None else numbers
        now = time.monotonic() if now is None else now
        counters = _counters(numbers)
        heap_current, heap_maximum = _memory()
        values = {
            "version": f"hookbridge version {version()}",
            "uptime": f"{int(now - self.started)} seconds",
            "clients/connected": numbers.clients_connected,
            "clients/active": numbers.clients_connected,  # Mosquitto's older name
            "clients/disconnected": numbers.clients_disconnected,
            "clients/inactive": numbers.clients_disconnected,  # Mosquitto's older name
            "clients/total": numbers.clients_connected + numbers.clients_disconnected,
            "clients/maximum": numbers.clients_maximum,
            "clients/expired": numbers.clients_expired,
            "heap/current": heap_current,
            "heap/maximum": heap_maximum,
            "messages/received": numbers.packets_received,
            "messages/sent": numbers.packets_sent,
            "publish/messages/received": numbers.publish_received,
            "publish/messages/sent": numbers.publish_sent,
            "publish/messages/dropped": counters["publish_dropped"],
            "publish/bytes/received": numbers.publish_bytes_received,
            "publish/bytes/sent": numbers.publish_bytes_sent,
            "bytes/received": numbers.bytes_received,
            "bytes/sent": numbers.bytes_sent,
            "subscriptions/count": numbers.subscriptions,
            "shared_subscriptions/count": numbers.shared_subscriptions,
            "retained messages/count": numbers.retained,
            "messages/stored": numbers.stored_messages,  # Mosquitto's older name
            "store/messages/count": numbers.stored_messages,
            "store/messages/bytes": numbers.stored_bytes,
        }
        values.update(self._load(now, counters))
        out = {PREFIX + name: str(value) for name, value in values.items()}
        if self.bridge_status is not None:
            out.update({OWN_PREFIX + name: value for name, value in self.bridge_status().items()})
        return out

    def _load(self, now: float, counters: dict[str, int]) -> dict[str, str]:
        """Mosquitto's loads: the per-minute rate over the last interval, folded into a moving
        average per window (new = rate + e^(-dt/window) * (old - rate)); all start at 0."""
        elapsed = now - self._last_time
        out: dict[str, str] = {}
        for name, counter in _LOADS:
            count_now = counters[counter]
            previous = self._last_counts.get(counter, 0)
            self._last_counts[counter] = count_now
            rate = (count_now - previous) * 60.0 / elapsed if elapsed > 0 else 0.0
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
        numbers = await self.census.fresh()  # in slices on a big broker: no stall of the others
        changed = [(t, v) for t, v in self.values(numbers=numbers).items() if self._published.get(t) != v]
        for topic, value in changed:
            message = Message(broker.msgids.next(), topic, value.encode(), 0, True, "")
            # as any retained publish, by the broker itself; made again at every start, so not durable
            await broker.publish(message, durable_retain=False)
            self._published[topic] = value
        return len(changed)


def _counters(numbers: BrokerNumbers) -> dict[str, int]:
    """The growing counters the loads are rates of, by the names _LOADS gives."""
    counters = {name: getattr(numbers, name) for _, name in _LOADS if name != "publish_dropped"}
    # Mosquitto's publish/messages/dropped: messages a full queue dropped (not ACL refusals)
    counters["publish_dropped"] = sum(numbers.dropped[reason] for reason in QUEUE_DROP_REASONS)
    return counters


def _memory() -> tuple[int, int]:
    """(current, maximum) bytes of memory, for heap/current and heap/maximum: Mosquitto counts
    what its allocator holds; a Python process is measured by its resident memory (the
    interpreter's and the bridge's, rules and pools included)."""
    import resource

    maximum = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes
    try:
        with open("/proc/self/statm") as statm:
            current = int(statm.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):  # not Linux: the maximum is what there is
        current = maximum
    return current, max(current, maximum)
