"""What the embedded broker keeps per client id, connected or not.

A session holds its subscriptions (each with the `live_from` message id the fetch protocol
needs, and its MQTT 5.0 options), one outbox that is both the send queue and the offline queue
(bounded by count and by bytes, oldest dropped first, each drop counted), the in-flight window
keyed by packet id (so an ack maps back to its msgid), and the packet ids of QoS 2 messages the
client has sent but not yet released.

Every session's outbox also counts towards one broker-wide bound (queuedbytes.QueuedBytes,
broker.max_queued_bytes): past it the oldest messages of the largest queues are dropped, by the
same `drop_oldest` as a session's own bounds (counted under its reason, logged, a durable
session's position moved past them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from bridge.brokers.embedded.access import ALLOW_ALL, Permissions
from bridge.brokers.embedded.codec import EMPTY, MQTT_3_1_1, Properties, Will
from bridge.brokers.embedded.inflight import InflightWindow

if TYPE_CHECKING:
    from bridge.brokers.embedded.limits import Limits
    from bridge.brokers.embedded.queuedbytes import QueuedBytes
    from bridge.brokers.embedded.stream import EventStream, Kept

log = logging.getLogger("bridge.brokers.embedded")

# At most one "queue full" warning per session per this many seconds.
_DROP_LOG_INTERVAL = 5.0
# Bytes a queued message costs beside its topic and payload (the objects holding it).
MESSAGE_OVERHEAD = 200
NEVER = 0xFFFFFFFF
"""A session expiry interval that never ends (MQTT 5.0 3.1.2.11.2)."""
# What a session holds none of (its subscriptions, its QoS 2 ids), read-only and shared by all:
# an empty dict is 64 bytes, and most of a fleet's sessions have no QoS 2 message in progress, an
# idle client no subscription (docs/benchmarks.md#memory-per-idle-connection). Read-only, so a
# write that forgot to go through SessionState's methods fails instead of reaching every session.
_NONE: Mapping[Any, Any] = MappingProxyType({})


class Link(Protocol):
    """The connection a session is attached to, as the session sees it (connection.Connection)."""

    @property
    def will(self) -> Will | None: ...

    def pump(self) -> None:
        """Send what the session has queued, as far as the window allows."""


class SessionJournal(Protocol):
    """Where a durable session's changes go (durable.Journal)."""

    def touch(self, state: SessionState, *, whole: bool = False) -> None: ...

    # Done once what is pending now is committed (None: nothing pending): aftercommit.py
    def committed(self) -> asyncio.Future[None] | None: ...


class Outgoing:
    """One message on its way to one session (routed, retained or delivered).

    A class of its own rather than a dataclass: compiled, a dataclass keeps the interpreted
    `__init__` the dataclasses module generates, 390 ns a message against 46 ns for this one
    (docs/benchmarks.md#per-message-objects-built-natively)."""

    __slots__ = (
        "expires",
        "filters",
        "from_clientid",
        "msgid",
        "packet_id",
        "payload",
        "properties",
        "pubrec",
        "qos",
        "retain",
        "seq",
        "subscription_ids",
        "topic",
    )

    def __init__(
        self,
        msgid: str,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        from_clientid: str,
        filters: tuple[str, ...],
        properties: Properties = EMPTY,
        expires: float = 0.0,
        subscription_ids: tuple[int, ...] = (),
        packet_id: int = 0,
        pubrec: bool = False,
        seq: int = 0,
    ) -> None:
        self.msgid = msgid
        self.topic = topic
        self.payload = payload
        self.qos = qos  # the QoS it is delivered with
        self.retain = retain  # the retain flag it is delivered with
        self.from_clientid = from_clientid
        self.filters = filters
        self.properties = properties  # forwarded 5.0 properties (message expiry set when sent)
        self.expires = expires  # monotonic deadline; 0: never
        self.subscription_ids = subscription_ids
        self.packet_id = packet_id
        self.pubrec = pubrec  # QoS 2: PUBREC received, PUBREL sent, waiting for PUBCOMP
        self.seq = seq  # its place in the durable store's log; 0: not logged (durable/journal.py)

    @property
    def size(self) -> int:
        return len(self.topic) + len(self.payload) + MESSAGE_OVERHEAD

    def __repr__(self) -> str:
        return (
            f"Outgoing({self.msgid!r}, {self.topic!r}, qos={self.qos}, retain={self.retain}, "
            f"packet_id={self.packet_id}, seq={self.seq})"
        )


@dataclass(slots=True)
class Subscription:
    filter: str  # as the client sent it: `$share/<group>/<filter>` for a shared one
    qos: int
    # Messages routed to this subscription have an id >= live_from: a message
    # that got its id before the subscription existed is never routed to it.
    live_from: str
    no_local: bool = False
    retain_as_published: bool = False
    identifier: int = 0  # 5.0 subscription identifier; 0: none


class IncomingQos2:
    """A QoS 2 PUBLISH from the client, passed on, whose packet id is held until PUBREL (one per
    QoS 2 message: a class of its own for the reason `Outgoing` is)."""

    __slots__ = ("acked", "kept")

    def __init__(self, kept: Kept = None, *, acked: bool = False) -> None:
        self.kept = kept  # done once the bridge kept the message: PUBREC may go out
        # Passed on and kept: a durable session stores only these ids, committed with the message
        # (durable/journal.py hold_incoming), so a resend after a restart is acknowledged again.
        self.acked = acked


@dataclass(slots=True)
class PendingWill:
    """A will waiting out its delay (5.0 will delay interval) after its connection ended."""

    will: Will
    peername: str
    timer: asyncio.TimerHandle | None = field(default=None)
    due: float = 0.0  # wall-clock time it goes out


class SessionState:
    """What the broker knows about one client id, connected or not."""

    # Slots: a fleet holds one of these per device, and a dict of 25 attributes costs about a
    # kilobyte more than the slots do (docs/benchmarks.md#fleet-scale: 3 KB per idle connection).
    __slots__ = (
        "_last_drop_log",
        "_queued",
        "_refused",
        "clientid",
        "conn",
        "dropped",
        "expires_at",
        "expiry",
        "expiry_timer",
        "heap_mark",
        "incoming_qos2",
        "inflight",
        "journal",
        "level",
        "limits",
        "outbox",
        "outbox_bytes",
        "owner",
        "permissions",
        "permissions_known",
        "persisted",
        "position",
        "stream",
        "subscriptions",
        "unloaded",
        "username",
        "will",
    )

    def __init__(
        self,
        clientid: str,
        *,
        expiry: int,
        username: str | None,
        stream: EventStream,
        limits: Limits,
        refused: Counter[str],
        level: int = MQTT_3_1_1,
        queued: QueuedBytes | None = None,
    ) -> None:
        self.clientid = clientid
        self.expiry = expiry  # seconds the session outlives its connection; 0: ends with it
        self.username = username
        self.level = level
        self.stream = stream  # this client's events, in order, to the bridge's sink (stream.py)
        self.limits = limits
        self._refused = refused
        self._queued = queued  # the broker-wide bound; None: none
        self.heap_mark = 0  # QueuedBytes: its live heap entry, 0: none
        # Read like dicts; changed only through add_subscription / remove_subscription.
        self.subscriptions: Mapping[str, Subscription] = _NONE
        # The queue: a deque while it holds messages, the shared empty tuple while it does not
        # (an empty deque costs about 600 bytes, and most of a fleet's queues are empty); both
        # read alike (len, iteration, truth), only the methods below change it.
        self.outbox: deque[Outgoing] | tuple[()] = ()
        self.outbox_bytes = 0
        self.inflight: InflightWindow[Outgoing] = InflightWindow()  # sent, not acknowledged (inflight.py)
        # Changed only through hold_incoming_qos2 / release_incoming_qos2.
        self.incoming_qos2: Mapping[int, IncomingQos2] = _NONE
        self.conn: Link | None = None
        # What the client logged in as may do (bridge/brokers/embedded/access.py), asked on
        # every subscribe, publish and delivery; replaced at each login.
        self.permissions: Permissions = ALLOW_ALL
        # False for a session restored from the durable store until its permissions are read
        # again (Broker.permissions_of, or its client's next login).
        self.permissions_known = True
        self.owner = username  # the user that created the session (broker.takeover = same_user)
        self.will: PendingWill | None = None
        self.expiry_timer: asyncio.TimerHandle | None = None
        self.expires_at = 0.0  # wall-clock time the expiry timer fires (durable sessions keep it)
        # Durable sessions (durable/journal.py): the journal is told of every change to what
        # is stored of this session; `persisted` while it has a row; `position` at a restart.
        self.journal: SessionJournal | None = None
        self.persisted = False
        self.position = 0
        # Restored from the durable store at a restart but its queue not read back yet (what is
        # stored of it that is not loaded: its in-flight window, "inflight"); None once loaded
        # (journal.Journal.load). Until then `position` is where its queue starts in the log.
        self.unloaded: dict[str, Any] | None = None
        self.dropped = 0
        self._last_drop_log = 0.0

    def add_subscription(self, sub: Subscription) -> None:
        """Hold `sub` under its filter (replacing the one there)."""
        subscriptions = self.subscriptions
        if not isinstance(subscriptions, dict):
            subscriptions = self.subscriptions = {}
        subscriptions[sub.filter] = sub

    def remove_subscription(self, full_filter: str) -> Subscription | None:
        """Drop the subscription of `full_filter`; the one dropped, None if there was none."""
        subscriptions = self.subscriptions
        if full_filter not in subscriptions:
            return None
        assert isinstance(subscriptions, dict)
        found: Subscription = subscriptions.pop(full_filter)
        if not subscriptions:
            self.subscriptions = _NONE
        return found

    def hold_incoming_qos2(self, packet_id: int, held: IncomingQos2) -> None:
        """Hold a QoS 2 packet id from the client until its PUBREL."""
        incoming = self.incoming_qos2
        if not isinstance(incoming, dict):
            incoming = self.incoming_qos2 = {}
        incoming[packet_id] = held

    def release_incoming_qos2(self, packet_id: int) -> IncomingQos2 | None:
        """The PUBREL came: the packet id is free again; what was held under it, if anything."""
        incoming = self.incoming_qos2
        if packet_id not in incoming:
            return None
        assert isinstance(incoming, dict)
        held: IncomingQos2 = incoming.pop(packet_id)
        if not incoming:
            self.incoming_qos2 = _NONE
        return held

    @property
    def clean(self) -> bool:
        """True when the session ends with its connection (not persistent, for fetch too)."""
        return self.expiry == 0

    @property
    def connected(self) -> bool:
        return self.conn is not None

    @property
    def durable(self) -> bool:
        """Kept on disk across restarts: durable sessions on, and it outlives its connection."""
        return self.journal is not None and self.expiry > 0

    def touch(self, *, whole: bool = False) -> None:
        """What is stored of the session changed (a no-op unless it is durable): its position,
        in-flight window and QoS 2 ids, or with `whole` also the rest (subscriptions, will, expiry)."""
        if self.journal is not None:
            self.journal.touch(self, whole=whole)

    def enqueue(self, message: Outgoing) -> None:
        """Queue a message for this session, dropping the oldest queued ones past the bounds."""
        limits = self.limits
        size = message.size
        outbox = self.outbox
        if not isinstance(outbox, deque):
            outbox = self.outbox = deque()
        outbox.append(message)
        self.outbox_bytes += size
        queued = self._queued
        if queued is not None:
            queued.total += size
        count_limit = limits.max_offline_messages
        while len(outbox) > 1 and (
            (count_limit and len(outbox) > count_limit) or self.outbox_bytes > limits.max_offline_bytes
        ):
            reason = "offline_messages" if count_limit and len(outbox) > count_limit else "offline_bytes"
            self.drop_oldest(reason)
        if queued is not None and (queued.live or queued.total > queued.bound):
            queued.queued(self)  # may drop from any session's queue, this one's too (even the new message)
        if self.conn is not None:
            self.conn.pump()

    def drop_oldest(self, reason: str) -> None:
        """Drop the oldest queued message, counted under `reason` (limits.REFUSALS) and in
        `dropped`; a durable session's position moves past it (the journal is touched)."""
        dropped = self._take()
        self._forget(dropped.size)
        if dropped.seq:
            self.touch()
        self.count_drop(reason)

    def count_drop(self, reason: str) -> None:
        """A message of this session's queue was dropped (here, or from its queue in the durable
        store while it is not loaded: durable/owed.py): counted under `reason`, logged."""
        self.dropped += 1
        self._refused[reason] += 1
        if reason == "queued_bytes" and self._queued is not None:
            self._queued.log_drop(self)
            return
        now = time.monotonic()
        if self.dropped == 1 or now - self._last_drop_log >= _DROP_LOG_INTERVAL:
            self._last_drop_log = now
            log.warning(
                "message queue of client %r is full (%d messages): dropped the oldest, %d dropped so far"
                " (%s limit; %d bytes queued)",
                self.clientid,
                self.queued_count,
                self.dropped,
                "count" if reason == "offline_messages" else "size",
                self.queued_bytes,
            )

    @property
    def queued_count(self) -> int:
        """Messages queued: in memory, or owed in the durable store while it is not loaded."""
        return len(self.outbox) + (self.unloaded["owed"].count if self.unloaded is not None else 0)

    @property
    def queued_bytes(self) -> int:
        return self.outbox_bytes + (self.unloaded["owed"].bytes if self.unloaded is not None else 0)

    def _forget(self, size: int) -> None:
        self.outbox_bytes -= size
        if self._queued is not None:
            self._queued.total -= size

    def keep_readable(self, permissions: Permissions) -> None:
        """Drop (uncounted) the queued messages a new login may not read (queued before it)."""
        kept = deque(m for m in self.outbox if permissions.may_read(m.topic))
        self._forget(self.outbox_bytes - sum(m.size for m in kept))
        self.outbox = kept or ()

    def _take(self) -> Outgoing:
        """The oldest queued message, out of the queue (which must hold one)."""
        outbox = self.outbox
        assert isinstance(outbox, deque)
        message = outbox.popleft()
        if not outbox:
            self.outbox = ()
        return message

    def pop(self) -> Outgoing:
        """The oldest queued message, out of the queue. A durable session's position moves with
        it: the caller `touch()`es the session once for the messages it took (a turn of
        deliveries takes many)."""
        message = self._take()
        self._forget(message.size)
        return message

    def acked(self, packet_id: int) -> Outgoing | None:
        """Remove a QoS 1 message (PUBACK) or finish a QoS 2 one (PUBCOMP)."""
        message = self.inflight.remove(packet_id)
        if message is not None:
            if message.seq:
                self.touch()
            if self.conn is not None:
                self.conn.pump()
        return message

    def cancel_timers(self) -> None:
        if self.expiry_timer is not None:
            self.expiry_timer.cancel()
            self.expiry_timer = None
        if self.will is not None and self.will.timer is not None:
            self.will.timer.cancel()
        self.will = None

    def discard(self) -> None:
        """Forget everything queued (the session ends)."""
        self.cancel_timers()
        self.outbox = ()
        self._forget(self.outbox_bytes)
        self.inflight.clear()
        self.incoming_qos2 = _NONE
        self.subscriptions = _NONE
