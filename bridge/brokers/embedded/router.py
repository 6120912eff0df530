"""Routing table, retained messages and publish ordering of the embedded broker.

- one copy per session, at min(publish QoS, max granted QoS of the matching filters), naming
  every matching filter and carrying every matching subscription identifier (MQTT-3.3.5-1,
  5.0 3.3.4);
- messages are routed in message-id order (a sequencer), so deliveries to one subscriber follow
  publish order;
- a subscription only gets messages whose id is >= its `live_from`, so a fetch that stops before
  `live_from` never overlaps with live routing;
- `$` topics are not matched by a first-level wildcard (bridge.topics);
- subscriptions and retained messages are kept in topic trees (topictree.py): a publish costs
  in proportion to its topic's levels and the subscriptions it matches, a SUBSCRIBE in
  proportion to the retained messages its filter matches, whatever the size of the fleet;
- a shared subscription `$share/<group>/<filter>` gets each message once per group: the next
  member in turn among those that will queue it (read permission, QoS 0 only to connected
  members), connected members first (5.0 4.8.2);
- no local: a subscription with it never gets its own client's messages;
- with durable sessions (durable/journal.py) a message a durable session gets is logged once,
  with the durable sessions it concerns (`routed`, `targets`); after a restart a session's queue
  is read back from the log when it is first needed (`replay_for`), and until then a message
  routed to it is only logged, not queued (its load reads it from the log, once, in order).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final, Protocol

from bridge.brokers.embedded.codec import EMPTY, Properties, split_shared
from bridge.brokers.embedded.compact import shrink_if_sparse
from bridge.brokers.embedded.sessions import Outgoing, SessionState, Subscription
from bridge.brokers.embedded.topictree import FilterTree, RetainedTree
from bridge.brokers.eventloop import running_loop
from bridge.topics import is_wildcard, matches

# A message given to one session (not by matching its subscriptions), as the log keeps it:
# the QoS, retain flag, filters and subscription identifiers it went out with.
Target = tuple[int, bool, tuple[str, ...], tuple[int, ...]]

_Subscribers = dict[str, tuple[SessionState, Subscription]]


class Retained:
    """A topic's retained message: read-only, a class of its own for the reason `Message` is
    (one is built for every retained publish, and for every retained message a restart reads)."""

    __slots__ = ("expires", "from_clientid", "msgid", "payload", "properties", "qos", "topic")

    def __init__(
        self,
        msgid: str,
        topic: str,
        payload: bytes,
        qos: int,
        from_clientid: str,
        properties: Properties = EMPTY,
        expires: float = 0.0,
    ) -> None:
        self.msgid: Final = msgid
        self.topic: Final = topic
        self.payload: Final = payload
        self.qos: Final = qos
        self.from_clientid: Final = from_clientid
        self.properties: Final = properties
        self.expires: Final = expires  # monotonic deadline; 0: never

    def __repr__(self) -> str:
        return f"Retained({self.msgid!r}, {self.topic!r}, qos={self.qos}, from={self.from_clientid!r})"


class Message:
    """A published message as routing sees it: read-only (`Final`, which mypy holds).

    A class of its own rather than a frozen dataclass, which every message pays for: compiled,
    a dataclass keeps the `__init__` the dataclasses module generates at import (interpreted,
    one `object.__setattr__` per field when frozen), 720 ns a message against 25 ns for this one
    (docs/benchmarks.md#per-message-objects-built-natively)."""

    __slots__ = ("expires", "from_clientid", "msgid", "payload", "properties", "qos", "retain", "topic")

    def __init__(
        self,
        msgid: str,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        from_clientid: str,
        properties: Properties = EMPTY,
        expires: float = 0.0,
    ) -> None:
        self.msgid: Final = msgid
        self.topic: Final = topic
        self.payload: Final = payload
        self.qos: Final = qos
        self.retain: Final = retain
        self.from_clientid: Final = from_clientid
        self.properties: Final = properties
        self.expires: Final = expires  # monotonic deadline; 0: never

    def __repr__(self) -> str:
        return (
            f"Message({self.msgid!r}, {self.topic!r}, qos={self.qos}, retain={self.retain}, "
            f"from={self.from_clientid!r})"
        )


class MessageLog(Protocol):
    """Where messages for durable sessions are logged (durable.Journal)."""

    def reserve(self) -> int:
        """The next sequence number of the log."""

    def log(
        self,
        seq: int,
        message: Message,
        *,
        routed: Sequence[str] = (),
        targets: dict[str, Target] | None = None,
    ) -> None:
        """Log a message: for the durable sessions `routed` to by subscription (routed again by
        subscription when read back), and given to `targets` one by one."""

    def retain(self, retained: Retained) -> None: ...

    def unretain(self, topic: str) -> None: ...

    def committed(self) -> asyncio.Future[None] | None:
        """Done once what is logged now is committed; None when nothing is pending."""


class Sequencer:
    """Lets publishes route in the order they got their message ids.

    `enter()` is called in the same step that generates the id and returns a ticket;
    `wait(ticket)` returns once every earlier ticket has left (routed or given up);
    `leave(ticket)` must always follow. A future is made only for a publish that has to wait
    (the usual publish waits for nobody: making one per message was a measurable cost).
    """

    def __init__(self) -> None:
        self._issued = 0
        self._next = 0  # the smallest ticket that has not left
        self._left: set[int] = set()
        self._waiters: dict[int, asyncio.Future[None]] = {}

    def enter(self) -> int:
        ticket = self._issued
        self._issued += 1
        return ticket

    def ready(self, ticket: int) -> bool:
        return ticket == self._next

    async def wait(self, ticket: int) -> None:
        if ticket != self._next:
            waiter = running_loop().create_future()
            self._waiters[ticket] = waiter
            try:
                await waiter
            finally:
                self._waiters.pop(ticket, None)

    def leave(self, ticket: int) -> None:
        if ticket != self._next:
            self._left.add(ticket)
            return
        self._next += 1
        while self._next in self._left:
            self._left.remove(self._next)
            self._next += 1
        waiter = self._waiters.get(self._next)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Group:
    """The members of one shared subscription group on one filter, served in turn."""

    __slots__ = ("members", "turn")

    def __init__(self) -> None:
        self.members: _Subscribers = {}
        self.turn = 0

    def pick(self, message: Message) -> tuple[SessionState, Subscription] | None:
        """The member that gets `message`: in turn among the members that will queue it, so a
        member the ACL denies (or an offline one, for QoS 0) never takes a message from the
        group (such a pick once lost the message for every member). Connected members first; an
        offline one only when none is connected (QoS > 0: queued for it).

        The walk starts at the member after the last one picked and stops at the first connected
        one that will take the message; the ACL is asked only of a member that could get it, so a
        message costs one or two ACL checks however big the group, where asking every member (as
        before) cost a thousand for a group of a thousand workers. A group with no member
        connected is walked whole for that (an attribute read a member), its ACL asked until an
        offline member may read the message."""
        members = list(self.members.values())
        count = len(members)
        msgid, topic = message.msgid, message.topic
        offline: int | None = None  # position of the first offline member that may read it
        for step in range(count):
            at = (self.turn + step) % count
            state, sub = members[at]
            if msgid < sub.live_from or (sub.no_local and state.clientid == message.from_clientid):
                continue
            if state.connected:
                if state.permissions.may_read(topic):
                    self.turn = at + 1
                    return members[at]
            elif offline is None and message.qos > 0 and state.permissions.may_read(topic):
                offline = at  # QoS 0 is not queued for offline sessions
        if offline is None:
            return None
        self.turn = offline + 1
        return members[offline]


def _payload_size(retained: Retained) -> int:
    return len(retained.payload)


class Router:
    def __init__(self) -> None:
        self._subscribers: FilterTree[_Subscribers] = FilterTree()
        self._shared: FilterTree[dict[str, _Group]] = FilterTree()  # filter -> group name -> members
        self.retained: RetainedTree[Retained] = RetainedTree(_payload_size)  # payload bytes kept ($SYS)
        self.sequencer = Sequencer()
        self.journal: MessageLog | None = None  # durable sessions on

    def subscribe(self, state: SessionState, sub: Subscription) -> bool:
        """Add or replace a subscription; True when the session did not have this filter."""
        existing = state.subscriptions.get(sub.filter)
        if existing is not None:
            # Replaced in place: messages keep flowing, the original live_from stays.
            existing.qos, existing.no_local = sub.qos, sub.no_local
            existing.retain_as_published, existing.identifier = sub.retain_as_published, sub.identifier
            return False
        state.add_subscription(sub)
        group, topic_filter = split_shared(sub.filter)
        if group is None:
            self._subscribers.setdefault(topic_filter, {})[state.clientid] = (state, sub)
        else:
            groups = self._shared.setdefault(topic_filter, {})
            groups.setdefault(group, _Group()).members[state.clientid] = (state, sub)
        return True

    def unsubscribe(self, state: SessionState, full_filter: str) -> bool:
        if state.remove_subscription(full_filter) is None:
            return False
        group, topic_filter = split_shared(full_filter)
        if group is None:
            subscribers = self._subscribers.get(topic_filter)
            if subscribers is not None:
                subscribers.pop(state.clientid, None)
                if not subscribers:
                    self._subscribers.pop(topic_filter)
                else:
                    shrink_if_sparse(subscribers)  # a filter a fleet shared, most of it gone
        else:
            groups = self._shared.get(topic_filter)
            if groups is not None:
                members = groups.get(group)
                if members is not None:
                    members.members.pop(state.clientid, None)
                    if not members.members:
                        del groups[group]
                    else:
                        shrink_if_sparse(members.members)
                if not groups:
                    self._shared.pop(topic_filter)
        return True

    def subscribers_of(self, full_filter: str) -> dict[str, tuple[SessionState, Subscription]]:
        """The sessions subscribed to exactly `full_filter` (`$share/<group>/...` too), by client id,
        from the tree: what the API's `subscriptions?filter=` lists. Not to be changed."""
        group, topic_filter = split_shared(full_filter)
        if group is None:
            return self._subscribers.get(topic_filter) or {}
        groups = self._shared.get(topic_filter)
        members = groups.get(group) if groups is not None else None
        return members.members if members is not None else {}

    def subscribed(self, topic: str) -> list[SessionState]:
        """The sessions with a non-shared subscription matching `topic` (a session with several
        such filters once for each): whom `route` would consider for it."""
        return [state for subscribers in self._subscribers.matching(topic) for state, _sub in subscribers.values()]

    def unsubscribe_all(self, state: SessionState) -> None:
        for topic_filter in list(state.subscriptions):
            self.unsubscribe(state, topic_filter)

    def route(self, message: Message) -> int:
        """Queue a published message to every session with a matching subscription; returns how
        many sessions got it.

        With durable sessions, a message some durable session gets is logged (once): as routed
        by subscription when one gets it so (read back by matching again, `replay_for`), with
        the sessions a shared subscription's pick gave it to by name (`targets`). A durable
        session whose queue is still in the log (not loaded since a restart) counts as getting
        it, and is not queued to."""
        msgid, topic = message.msgid, message.topic
        found: dict[str, tuple[SessionState, list[Subscription]]] = {}
        for subscribers in self._subscribers.matching(topic):
            for clientid, (state, sub) in subscribers.items():
                if msgid < sub.live_from:
                    continue
                entry = found.get(clientid)
                if entry is None:
                    found[clientid] = (state, [sub])
                else:
                    entry[1].append(sub)
        journal = self.journal
        seq = journal.reserve() if journal is not None and message.qos else 0
        durable: list[str] = []  # the durable sessions it is logged for
        routed = 0
        for state, subs in found.values():
            out = self._queue(state, subs, message, seq)
            if out is not None:
                routed += 1
                if out.seq:
                    durable.append(state.clientid)
        targets: dict[str, Target] = {}
        if len(self._shared):
            for groups in self._shared.matching(topic):
                for group in groups.values():
                    member = group.pick(message)
                    if member is not None:
                        out = self._queue(member[0], [member[1]], message, seq)
                        if out is not None:
                            routed += 1
                            if out.seq:
                                targets[member[0].clientid] = target_of(out)
        if journal is not None and (durable or targets):
            journal.log(seq, message, routed=durable, targets=targets or None)
        return routed

    def replay_for(self, state: SessionState, message: Message, seq: int) -> bool:
        """Queue a logged message (logged as routed by subscription) to one session, as `route`
        gave it to the session: its matching non-shared subscriptions live at the message's id
        (a durable session's queue read back from the log, journal.py)."""
        msgid, topic = message.msgid, message.topic
        subs = [
            sub
            for full, sub in state.subscriptions.items()
            if not full.startswith("$share/") and msgid >= sub.live_from and matches(full, topic)
        ]
        return bool(subs) and self._queue(state, subs, message, seq) is not None

    @staticmethod
    def _queue(state: SessionState, subs: list[Subscription], message: Message, seq: int) -> Outgoing | None:
        """Queue a message to one session; `seq` (its log entry) is kept only by a durable
        session that gets it with QoS 1 or 2."""
        if not state.permissions.may_read(message.topic):
            return None
        if state.clientid == message.from_clientid:
            subs = [sub for sub in subs if not sub.no_local]
            if not subs:
                return None
        if len(subs) == 1:
            sub = subs[0]
            out_qos = message.qos if message.qos < sub.qos else sub.qos
        else:
            out_qos = min(message.qos, max(sub.qos for sub in subs))
        if out_qos == 0 and state.conn is None:
            return None  # QoS 0 is not queued for offline sessions
        if len(subs) > 1:  # name the filters in the session's subscription order
            names = {sub.filter for sub in subs}
            filters = tuple(f for f in state.subscriptions if f in names)
            ids = tuple(sorted({sub.identifier for sub in subs if sub.identifier}))
            retain = message.retain and any(sub.retain_as_published for sub in subs)
        else:
            sub = subs[0]
            filters = (sub.filter,)
            ids = (sub.identifier,) if sub.identifier else ()
            retain = message.retain and sub.retain_as_published
        out = Outgoing(
            message.msgid,
            message.topic,
            message.payload,
            out_qos,
            retain,
            message.from_clientid,
            filters,
            message.properties,
            message.expires,
            ids,
            seq=seq if out_qos and state.durable else 0,
        )
        if state.unloaded is not None:
            # Its queue is still in the log (a restart): logged for it, read back with the rest
            # of its queue, in order, when it is loaded.
            return out
        state.enqueue(out)
        return out

    def store_retained(self, message: Message, *, durable: bool = True) -> None:
        """Set or replace a topic's retained message; an empty payload deletes it. `durable`
        False: not written to the durable store (the broker's own `$SYS` status, made again at start)."""
        if message.payload:
            retained = self.retained[message.topic] = Retained(
                message.msgid,
                message.topic,
                message.payload,
                message.qos,
                message.from_clientid,
                message.properties,
                message.expires,
            )
            if self.journal is not None and durable:
                self.journal.retain(retained)
        elif self.retained.pop(message.topic, None) is not None and self.journal is not None:
            self.journal.unretain(message.topic)

    def retained_for(self, topic_filter: str, now: float) -> list[Retained]:
        """Retained messages matching a filter, oldest first; expired ones are removed."""
        if not is_wildcard(topic_filter):
            found = self.retained.get(topic_filter)
            candidates = [found] if found is not None else []
        else:
            candidates = sorted(self.retained.matching(topic_filter), key=lambda r: r.msgid)
        alive = []
        for retained in candidates:
            if retained.expires and retained.expires <= now:
                self.retained.pop(retained.topic, None)
                if self.journal is not None:
                    self.journal.unretain(retained.topic)
            else:
                alive.append(retained)
        return alive


def target_of(out: Outgoing) -> Target:
    """How one session got a message given to it alone (a log entry's `targets`)."""
    return (out.qos, out.retain, out.filters, out.subscription_ids)
