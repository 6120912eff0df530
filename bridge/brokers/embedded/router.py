"""Routing table, retained messages and publish ordering of the embedded broker.

Replaces amqtt's `_subscriptions` / `_broadcast_loop` / `_retained_messages`:

- one copy per session, at min(publish QoS, max granted QoS of the matching
  filters), with every matching filter named (amqtt sends one copy per filter
  at the subscription's QoS);
- messages are routed in message-id order (a sequencer), so deliveries to one
  subscriber follow publish order (amqtt spawns one task per delivery);
- a subscription only gets messages whose id is >= its `live_from`, so a fetch
  that stops before `live_from` never overlaps with live routing;
- `$` topics are not matched by a first-level wildcard (bridge.topics).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from bridge.brokers.embedded.sessions import Outgoing, SessionState, Subscription
from bridge.topics import is_wildcard, matches

_Subscribers = dict[str, tuple[SessionState, Subscription]]


@dataclass(frozen=True, slots=True)
class Retained:
    msgid: str
    topic: str
    payload: bytes
    qos: int
    from_clientid: str


class Sequencer:
    """Lets publishes route in the order they got their message ids.

    `enter()` is called in the same step that generates the id; `wait()`
    returns once every earlier publish has routed (or given up); `leave()`
    must always follow.
    """

    def __init__(self) -> None:
        self._tail: asyncio.Future[None] | None = None

    def enter(self) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        previous, mine = self._tail, asyncio.get_running_loop().create_future()
        self._tail = mine
        return previous, mine

    @staticmethod
    async def wait(previous: asyncio.Future[None] | None) -> None:
        if previous is not None and not previous.done():
            await asyncio.shield(previous)

    def leave(self, mine: asyncio.Future[None]) -> None:
        if not mine.done():
            mine.set_result(None)
        if self._tail is mine:
            self._tail = None


class Router:
    def __init__(self) -> None:
        self._exact: dict[str, _Subscribers] = {}
        self._wild: dict[str, _Subscribers] = {}
        self.retained: dict[str, Retained] = {}
        self.sequencer = Sequencer()

    def _table(self, topic_filter: str) -> dict[str, _Subscribers]:
        return self._wild if is_wildcard(topic_filter) else self._exact

    def subscribe(self, state: SessionState, topic_filter: str, qos: int, live_from: str) -> bool:
        """Add or replace a subscription; True when the session did not have this filter."""
        existing = state.subscriptions.get(topic_filter)
        if existing is not None:
            # Replaced in place: messages keep flowing, the original live_from stays.
            existing.qos = qos
            return False
        sub = Subscription(topic_filter, qos, live_from)
        state.subscriptions[topic_filter] = sub
        self._table(topic_filter).setdefault(topic_filter, {})[state.clientid] = (state, sub)
        return True

    def unsubscribe(self, state: SessionState, topic_filter: str) -> bool:
        if state.subscriptions.pop(topic_filter, None) is None:
            return False
        table = self._table(topic_filter)
        subscribers = table.get(topic_filter)
        if subscribers is not None:
            subscribers.pop(state.clientid, None)
            if not subscribers:
                del table[topic_filter]
        return True

    def unsubscribe_all(self, state: SessionState) -> None:
        for topic_filter in list(state.subscriptions):
            self.unsubscribe(state, topic_filter)

    def route(self, msgid: str, topic: str, payload: bytes, qos: int, from_clientid: str) -> None:
        """Queue a published message to every session with a matching subscription."""
        found: dict[str, tuple[SessionState, list[Subscription]]] = {}
        exact = self._exact.get(topic)
        if exact:
            for clientid, (state, sub) in exact.items():
                if msgid >= sub.live_from:
                    found[clientid] = (state, [sub])
        for topic_filter, subscribers in self._wild.items():
            if not matches(topic_filter, topic):
                continue
            for clientid, (state, sub) in subscribers.items():
                if msgid < sub.live_from:
                    continue
                entry = found.get(clientid)
                if entry is None:
                    found[clientid] = (state, [sub])
                else:
                    entry[1].append(sub)
        for state, subs in found.values():
            out_qos = min(qos, max(sub.qos for sub in subs))
            if out_qos == 0 and not state.connected:
                continue  # QoS 0 is not queued for offline sessions
            if len(subs) > 1:  # name the filters in the session's subscription order
                names = {sub.filter for sub in subs}
                filters = tuple(f for f in state.subscriptions if f in names)
            else:
                filters = (subs[0].filter,)
            state.enqueue(Outgoing(msgid, topic, payload, out_qos, False, from_clientid, filters))

    def store_retained(self, msgid: str, topic: str, payload: bytes, qos: int, from_clientid: str) -> None:
        """Set or replace a topic's retained message; an empty payload deletes it."""
        if payload:
            self.retained[topic] = Retained(msgid, topic, payload, qos, from_clientid)
        else:
            self.retained.pop(topic, None)

    def retained_for(self, topic_filter: str) -> list[Retained]:
        """Retained messages matching a filter, oldest first."""
        if not is_wildcard(topic_filter):
            found = self.retained.get(topic_filter)
            return [found] if found is not None else []
        return sorted((r for topic, r in self.retained.items() if matches(topic_filter, topic)), key=lambda r: r.msgid)
