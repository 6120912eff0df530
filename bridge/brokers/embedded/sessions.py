"""What the embedded broker keeps per client id, connected or not.

A session holds its subscriptions (each with the `live_from` message id the fetch protocol
needs, and its MQTT 5.0 options), one outbox that is both the send queue and the offline queue
(bounded by count and by bytes, oldest dropped first, each drop counted), the in-flight window
keyed by packet id (so an ack maps back to its msgid), and the packet ids of QoS 2 messages the
client has sent but not yet released.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from bridge.brokers.embedded.access import ALLOW_ALL, Permissions
from bridge.mqtt import EMPTY, MQTT_3_1_1, Properties, Will

if TYPE_CHECKING:
    from bridge.brokers.embedded.lane import EventLane, Kept
    from bridge.brokers.embedded.limits import Limits

log = logging.getLogger("bridge.brokers.embedded")

# At most one "queue full" warning per session per this many seconds.
_DROP_LOG_INTERVAL = 5.0
# Bytes a queued message costs beside its topic and payload (the objects holding it).
MESSAGE_OVERHEAD = 200
NEVER = 0xFFFFFFFF
"""A session expiry interval that never ends (MQTT 5.0 3.1.2.11.2)."""


class Link(Protocol):
    """The connection a session is attached to, as the session sees it (connection.Connection)."""

    will: Will | None

    def pump(self) -> None:
        """Send what the session has queued, as far as the window allows."""


class SessionJournal(Protocol):
    """Where a durable session's changes go (durable.Journal)."""

    def touch(self, state: SessionState, *, whole: bool = False) -> None: ...


@dataclass(slots=True)
class Outgoing:
    """One message on its way to one session (routed, retained or delivered)."""

    msgid: str
    topic: str
    payload: bytes
    qos: int  # the QoS it is delivered with
    retain: bool  # the retain flag it is delivered with
    from_clientid: str
    filters: tuple[str, ...]
    properties: Properties = EMPTY  # forwarded 5.0 properties (message expiry set when sent)
    expires: float = 0.0  # monotonic deadline; 0: never
    subscription_ids: tuple[int, ...] = ()
    packet_id: int = 0
    pubrec: bool = False  # QoS 2: PUBREC received, PUBREL sent, waiting for PUBCOMP
    seq: int = 0  # its place in the durable store's log; 0: not logged (durable/journal.py)

    @property
    def size(self) -> int:
        return len(self.topic) + len(self.payload) + MESSAGE_OVERHEAD


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


@dataclass(slots=True)
class IncomingQos2:
    """A QoS 2 PUBLISH from the client, passed on, whose packet id is held until PUBREL."""

    kept: Kept = None  # done once the bridge kept the message: PUBREC may go out
    acked: bool = False  # PUBREC went out (a durable session keeps only these ids across a restart)


@dataclass(slots=True)
class PendingWill:
    """A will waiting out its delay (5.0 will delay interval) after its connection ended."""

    will: Will
    peername: str
    timer: asyncio.TimerHandle | None = field(default=None)
    due: float = 0.0  # wall-clock time it goes out


class SessionState:
    """What the broker knows about one client id, connected or not."""

    def __init__(
        self,
        clientid: str,
        *,
        expiry: int,
        username: str | None,
        lane: EventLane,
        limits: Limits,
        refused: Counter[str],
        level: int = MQTT_3_1_1,
    ) -> None:
        self.clientid = clientid
        self.expiry = expiry  # seconds the session outlives its connection; 0: ends with it
        self.username = username
        self.level = level
        self.lane = lane
        self.limits = limits
        self._refused = refused
        self.subscriptions: dict[str, Subscription] = {}
        self.outbox: deque[Outgoing] = deque()
        self.outbox_bytes = 0
        self.inflight: dict[int, Outgoing] = {}  # insertion order is send order
        self.incoming_qos2: dict[int, IncomingQos2] = {}
        self.conn: Link | None = None
        # What the client logged in as may do (bridge/brokers/embedded/access.py), asked on
        # every subscribe, publish and delivery; replaced at each login.
        self.permissions: Permissions = ALLOW_ALL
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
        self._packet_id = 0

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
        self.outbox.append(message)
        self.outbox_bytes += message.size
        count_limit = limits.max_offline_messages
        while len(self.outbox) > 1 and (
            (count_limit and len(self.outbox) > count_limit) or self.outbox_bytes > limits.max_offline_bytes
        ):
            reason = "offline_messages" if count_limit and len(self.outbox) > count_limit else "offline_bytes"
            self._drop_oldest(reason)
        if self.conn is not None:
            self.conn.pump()

    def _drop_oldest(self, reason: str) -> None:
        dropped = self.outbox.popleft()
        self.outbox_bytes -= dropped.size
        if dropped.seq:
            self.touch()
        self.dropped += 1
        self._refused[reason] += 1
        now = time.monotonic()
        if self.dropped == 1 or now - self._last_drop_log >= _DROP_LOG_INTERVAL:
            self._last_drop_log = now
            log.warning(
                "message queue of client %r is full (%d messages): dropped the oldest, %d dropped so far"
                " (%s limit; %d bytes queued)",
                self.clientid,
                len(self.outbox),
                self.dropped,
                "count" if reason == "offline_messages" else "size",
                self.outbox_bytes,
            )

    def pop(self) -> Outgoing:
        message = self.outbox.popleft()
        self.outbox_bytes -= message.size
        if message.seq:
            self.touch()
        return message

    def next_packet_id(self) -> int:
        """A packet id not used by any message in flight (1..65535)."""
        for _ in range(65535):
            self._packet_id = self._packet_id % 65535 + 1
            if self._packet_id not in self.inflight:
                return self._packet_id
        raise RuntimeError(f"no free packet id for client {self.clientid!r}")

    def acked(self, packet_id: int) -> Outgoing | None:
        """Remove a QoS 1 message (PUBACK) or finish a QoS 2 one (PUBCOMP)."""
        message = self.inflight.pop(packet_id, None)
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
        self.outbox.clear()
        self.outbox_bytes = 0
        self.inflight.clear()
        self.incoming_qos2.clear()
        self.subscriptions.clear()
