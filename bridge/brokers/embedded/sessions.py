"""Per-session state the embedded broker keeps beside amqtt's own `Session`.

amqtt keeps subscriptions in one broker-wide table of (session, qos) pairs,
queues offline messages without their identity and drops in-flight messages
after a 5 s timeout. The bridge needs more per session: each subscription's
`live_from` message id, one outbox that is both the send queue and the offline
queue (bounded, oldest dropped first), the in-flight window keyed by packet
id (so an ack maps back to its msgid), and the packet ids of QoS 2 messages a
client has sent but not yet released.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bridge.brokers.embedded.handler import BridgeHandler
    from bridge.brokers.embedded.lane import EventLane, Kept

log = logging.getLogger("bridge.brokers.embedded")

# Outgoing QoS 1/2 messages on the wire, unacknowledged, per session. MQTT 3.1.1
# has no receive maximum; this is the broker's own window (EMQX uses 32).
MAX_INFLIGHT = 32
# At most one "queue full" warning per session per this many seconds.
_DROP_LOG_INTERVAL = 5.0


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
    packet_id: int = 0
    pubrec: bool = False  # QoS 2: PUBREC received, PUBREL sent, waiting for PUBCOMP


@dataclass(slots=True)
class Subscription:
    filter: str
    qos: int
    # Messages routed to this subscription have an id >= live_from: a message
    # that got its id before the subscription existed is never routed to it.
    live_from: str


@dataclass(slots=True)
class IncomingQos2:
    """A QoS 2 PUBLISH from the client, passed on, whose packet id is held until PUBREL."""

    kept: Kept = None  # done once the bridge kept the message: PUBREC may go out


class SessionState:
    """What the broker knows about one client id, connected or not."""

    def __init__(self, clientid: str, *, clean: bool, username: str | None, lane: EventLane, max_queue: int) -> None:
        self.clientid = clientid
        self.clean = clean
        self.username = username
        self.lane = lane
        self.max_queue = max_queue
        self.subscriptions: dict[str, Subscription] = {}
        self.outbox: deque[Outgoing] = deque()
        self.inflight: dict[int, Outgoing] = {}  # insertion order is send order
        self.incoming_qos2: dict[int, IncomingQos2] = {}
        self.conn: BridgeHandler | None = None
        self.dropped = 0
        self._last_drop_log = 0.0
        self._packet_id = 0
        # Set when the outbox grows or the in-flight window shrinks.
        self.changed = asyncio.Event()

    @property
    def connected(self) -> bool:
        return self.conn is not None

    def enqueue(self, message: Outgoing) -> None:
        """Queue a message for this session; when the queue is full drop its oldest."""
        if len(self.outbox) >= self.max_queue:
            self.outbox.popleft()
            self.dropped += 1
            now = time.monotonic()
            if self.dropped == 1 or now - self._last_drop_log >= _DROP_LOG_INTERVAL:
                self._last_drop_log = now
                log.warning(
                    "message queue of client %r is full (%d messages): dropped the oldest, %d dropped so far",
                    self.clientid,
                    self.max_queue,
                    self.dropped,
                )
        self.outbox.append(message)
        self.changed.set()

    def can_send(self) -> bool:
        return bool(self.outbox) and len(self.inflight) < MAX_INFLIGHT

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
            self.changed.set()
        return message

    def discard(self) -> None:
        """Forget everything queued (the session ends)."""
        self.outbox.clear()
        self.inflight.clear()
        self.incoming_qos2.clear()
        self.subscriptions.clear()
