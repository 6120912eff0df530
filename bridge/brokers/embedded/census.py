"""The broker's state numbers (sessions, subscriptions, stored messages) without stalling it.

`$SYS/broker/...` and /metrics show numbers read from the broker's state: how many sessions are
connected, how many subscriptions they hold, how many messages are stored (each once, however many
queues hold it). Reading them means walking every session, its subscriptions and its queue: about
0.4 us an item on the 2-core machine of docs/benchmarks.md, so 450 ms for 15,000 sessions holding
1,000,000 subscriptions and 200,000 queued messages, every `$SYS` interval and every scrape, the
whole broker waiting meanwhile (no request may block the loop for more than a few
milliseconds).

So the walk is taken in slices of `SLICE` items, one slice per loop turn, and what is shown is
the last complete walk's, with the traffic counters (which cost nothing to read) as they are now.
A broker small enough to walk in one slice is walked when asked, so its numbers are exact at
once (as the tests and a small deployment expect). `fresh()` waits for a walk that starts after
the call: `$SYS` publishes from it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bridge.brokers.base import BrokerNumbers
from bridge.brokers.embedded.traffic import DROP_REASONS, SHARED_PREFIX

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Mapping

    from bridge.brokers.embedded.router import Retained
    from bridge.brokers.embedded.sessions import SessionState
    from bridge.brokers.embedded.topictree import RetainedTree
    from bridge.brokers.embedded.traffic import Traffic

log = logging.getLogger(__name__)

# Items (sessions, subscriptions, queued messages) walked per loop turn: about 2 ms. A session is
# never split between turns, so one turn may walk more: a session's subscriptions and queue are
# bounded by broker.max_subscriptions and max_offline_messages.
SLICE = 5_000
# A big broker's numbers read between walks (dropped messages, unloaded sessions) start a new walk
# when the last one is older than this; /metrics and `$SYS` wait for one of their own (fresh()).
RENEW_AFTER = 1.0


@dataclass(slots=True)
class Tally:
    """What one walk over the sessions found."""

    connected: int = 0
    disconnected: int = 0
    subscriptions: int = 0  # shared ones not included
    shared: int = 0
    dropped: int = 0  # dropped from these sessions' queues (Broker.dropped_by_ended_sessions: the rest)
    unloaded: int = 0  # durable sessions whose queue is not read back yet
    items: int = 0  # sessions + subscriptions + queued messages walked: the walk's size
    # Messages queued or in flight, each once however many sessions hold it, not counting a
    # retained one (counted with the retained messages): Mosquitto's message store
    stored: int = 0
    stored_bytes: int = 0  # their payload bytes
    seen: set[str] = field(default_factory=set)  # msgids of the messages queued or in flight

    def add(self, state: SessionState, retained: RetainedTree[Retained]) -> None:
        if state.connected:
            self.connected += 1
        else:
            self.disconnected += 1
        shared = sum(1 for name in state.subscriptions if name.startswith(SHARED_PREFIX))
        self.shared += shared
        self.subscriptions += len(state.subscriptions) - shared
        self.dropped += state.dropped
        self.unloaded += state.unloaded is not None
        seen = self.seen
        for messages in (state.outbox, state.inflight.values()):
            for message in messages:
                if message.msgid in seen:
                    continue
                seen.add(message.msgid)
                kept = retained.get(message.topic)
                if kept is None or kept.msgid != message.msgid:  # else counted as retained: stored once
                    self.stored += 1
                    self.stored_bytes += len(message.payload)
        self.items += 1 + len(state.subscriptions) + len(state.outbox) + len(state.inflight)


def numbers(tally: Tally, traffic: Traffic, retained: RetainedTree[Retained], refused: Counter[str]) -> BrokerNumbers:
    """The broker's numbers from a walk's tally and the counters as they are now.

    Stored messages are counted as Mosquitto's message store holds them: each message once,
    however many sessions have it queued or in flight, and every retained message (the broker's
    own `$SYS` ones included) whether or not a session also has it queued."""
    traffic.clients_maximum = max(traffic.clients_maximum, tally.connected + tally.disconnected)
    return BrokerNumbers(
        clients_connected=tally.connected,
        clients_disconnected=tally.disconnected,
        clients_maximum=traffic.clients_maximum,
        clients_expired=traffic.clients_expired,
        subscriptions=tally.subscriptions,
        shared_subscriptions=tally.shared,
        retained=len(retained),
        stored_messages=len(retained) + tally.stored,
        stored_bytes=retained.payload_bytes + tally.stored_bytes,
        packets_received=traffic.packets_received,
        packets_sent=traffic.packets_sent,
        publish_received=traffic.publish_received,
        publish_sent=traffic.publish_sent,
        bytes_received=traffic.bytes_received,
        bytes_sent=traffic.bytes_sent,
        publish_bytes_received=traffic.publish_bytes_received,
        publish_bytes_sent=traffic.publish_bytes_sent,
        sockets=traffic.sockets,
        connections=traffic.connections,
        dropped={reason: refused.get(reason, 0) for reason in DROP_REASONS},
    )


class Census:
    """The last complete walk over a broker's sessions, and the sliced walks that renew it."""

    def __init__(
        self,
        traffic: Traffic,
        states: Mapping[str, SessionState],
        retained: RetainedTree[Retained],
        refused: Counter[str],
        *,
        slice_items: int = SLICE,
    ) -> None:
        self._traffic, self._states, self._retained, self._refused = traffic, states, retained, refused
        self._slice = slice_items
        self.latest: Tally | None = None
        self._walked_at = 0.0  # the loop's time when `latest` was complete
        self._walk: asyncio.Task[Tally] | None = None
        self.walks_sliced = 0  # walks taken over more than one loop turn (tests, docs)

    def _small(self) -> bool:
        """Walkable in one slice, judged by the session count and the last walk's size."""
        size = len(self._states) + (self.latest.items if self.latest is not None else 0)
        return size <= self._slice

    def tally(self) -> Tally:
        """The state now when the broker is small, else the last complete walk's (a new one
        started when it is older than RENEW_AFTER and none is under way). Before any walk has
        completed, one is taken now."""
        if self._small() or self.latest is None:
            self._keep(self._walk_now())
        elif asyncio.get_running_loop().time() - self._walked_at > RENEW_AFTER:
            self._start()
        assert self.latest is not None
        return self.latest

    def numbers(self) -> BrokerNumbers:
        return numbers(self.tally(), self._traffic, self._retained, self._refused)

    async def fresh(self) -> BrokerNumbers:
        """The numbers from a walk started after this call (sliced when the broker is big)."""
        if self._small():
            return self.numbers()
        tally = await self._sliced()
        self._keep(tally)
        return numbers(tally, self._traffic, self._retained, self._refused)

    def close(self) -> None:
        if self._walk is not None:
            self._walk.cancel()
            self._walk = None

    def _keep(self, tally: Tally) -> None:
        self.latest = tally
        self._walked_at = asyncio.get_running_loop().time()

    def _walk_now(self) -> Tally:
        tally = Tally()
        for state in self._states.values():
            tally.add(state, self._retained)
        return tally

    def _start(self) -> None:
        if self._walk is None:
            self._walk = asyncio.get_running_loop().create_task(self._sliced(), name="broker census")
            self._walk.add_done_callback(self._walked)

    def _walked(self, task: asyncio.Task[Tally]) -> None:
        self._walk = None
        if not task.cancelled() and task.exception() is None:
            self._keep(task.result())
        elif not task.cancelled():
            log.error("walking the broker's sessions for its numbers failed", exc_info=task.exception())

    async def _sliced(self) -> Tally:
        tally = Tally()
        sessions = list(self._states.values())  # sessions that end meanwhile are still counted once
        budget = self._slice
        for state in sessions:
            before = tally.items
            tally.add(state, self._retained)
            budget -= tally.items - before
            if budget <= 0:
                budget = self._slice
                await asyncio.sleep(0)  # let everything else run between slices
        self.walks_sliced += 1
        return tally
