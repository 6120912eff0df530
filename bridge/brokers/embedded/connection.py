"""One client connection of the embedded broker: an asyncio protocol over the project's codec.

Bytes come in through `data_received`, are decoded by a strict incremental `Decoder` (a bad
packet closes the connection before any of it is handled) and become work items in `inbox`,
which one task (`_serve`, started only while there is work, so an idle connection holds no
task) hands to the broker in arrival order. Acknowledgements and pings are answered right here.

One connection's share of the loop (`TURN_PACKETS`, `TURN_BYTES`): whatever it sends, a
connection has at most so many packets handled and so many bytes written in answer before the
others get their turn; the rest of what it sent waits in its decoder, unread, until the next turn.

Bounded per connection (bridge/brokers/embedded/limits.py): the decoder refuses a packet over
`max_packet_size` as soon as its fixed header is read; a full inbox stops reading from the
socket; acknowledgements waiting for their messages to be kept are bounded; bytes written and
not yet taken by the client are bounded by `max_output_bytes`: past it delivery pauses (the
session's queue bounds apply) and so does reading from the socket, since every packet read may
be answered (PUBACK, PINGRESP, PUBREL, PUBCOMP, a WebSocket pong), until the client has taken
all but a quarter of it; outgoing QoS 1/2 messages are bounded by the in-flight window.

Acknowledgement means kept (docs/architecture.md#acknowledged-means-kept): a PUBACK / PUBREC goes out once every
rule's action for
the message is committed or spooled, in the order the messages came in [MQTT-4.6.0-2].
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from bridge.brokers.embedded.acks import AckQueue
from bridge.brokers.embedded.codec import (
    EMPTY,
    MQTT_5,
    Bounds,
    CodecError,
    Connack,
    Connect,
    ConnectReturnCode,
    Decoder,
    Disconnect,
    PacketTooLarge,
    Pingreq,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    ReasonCode,
    Subscribe,
    TooManyEntries,
    TooManyTopicLevels,
    TooManyUserProperties,
    Unsubscribe,
    UnsupportedProtocolVersion,
    Will,
    encode,
    encode_puback,
    encode_publish,
)
from bridge.brokers.embedded.sessions import IncomingQos2, Outgoing
from bridge.brokers.embedded.stream import Kept
from bridge.events import Hookpoint, MessageAcked, MessageDelivered

if TYPE_CHECKING:
    from collections import Counter

    from bridge.brokers.embedded.limits import Limits
    from bridge.brokers.embedded.sessions import SessionState
    from bridge.brokers.embedded.traffic import Traffic

log = logging.getLogger("bridge.brokers.embedded")


class Core(Protocol):
    """What a connection asks of the broker (broker.Broker): the packets that touch sessions
    and routing go there, in the connection's arrival order."""

    node: str
    limits: Limits
    refused: Counter[str]
    output_pauses: int  # times a connection's reading paused for its unsent output
    traffic: Traffic  # packets, PUBLISH packets and bytes in and out ($SYS/broker/...)

    def accept(self, conn: Connection) -> None: ...

    async def connect(self, conn: Connection, packet: Connect) -> None: ...

    async def publish_inbound(self, conn: Connection, items: Sequence[Inbound]) -> None: ...

    async def subscribe(self, conn: Connection, packet: Subscribe) -> None: ...

    async def unsubscribe(self, conn: Connection, packet: Unsubscribe) -> None: ...

    async def teardown(self, conn: Connection) -> None: ...

    def wants(self, hookpoint: Hookpoint, clientid: str, topic: str | None = None) -> bool: ...


# Work items waiting for the connection's task before reading from the socket pauses.
INBOX_SIZE = 256
# PUBLISH packets in a row handed to the broker at once (broker.publish_inbound): a burst goes
# through the rules in one pass and out to each subscriber in one write; bounded so that one
# busy publisher does not hold the loop for long.
PUBLISH_RUN = 64
# Acknowledgements waiting for their messages to be kept, per connection; beyond this the
# message loop waits too, its inbox fills and reading stops: what waits stays bounded.
UNACKED_LIMIT = 1024
# QoS 1/2 messages a 5.0 client may have unacknowledged towards the broker (announced in CONNACK
# as Receive Maximum; a client over it is disconnected with 0x93). Acknowledgements wait until
# the message is kept, so this is what lets a publisher pipeline writes.
RECEIVE_MAXIMUM = UNACKED_LIMIT
# One connection's budget per loop turn, whatever the packet types (docs/security.md#what-each-limit-bounds):
# packets decoded and handled, and bytes written to it (acknowledgements, PINGRESPs, SUBACKs...).
# Past either, the bytes after the packets handled wait in the decoder and the socket is not
# read until the next turn, or, if its output is over max_output_bytes, until the client has
# taken it (pause_writing): every other connection is served in between. A PINGREQ flood once
# held the loop for a whole 256 KB read (128,000 packets) per turn.
TURN_PACKETS = 256
TURN_BYTES = 64 << 10
# Topic aliases a 5.0 client may set towards the broker (announced in CONNACK).
TOPIC_ALIAS_MAXIMUM = 64
R = ReasonCode
# Seconds a connection closed with a DISCONNECT stays half-open so the client can read it.
_LINGER = 1.0
END = None  # the inbox item that ends the connection's task


@dataclass(slots=True)
class Inbound:
    """An application message the client published, with the acknowledgement it is owed."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Any
    expires: float
    ack: bytes | None = None  # PUBACK (QoS 1) or PUBREC (QoS 2), sent once the message is kept
    packet_id: int = 0
    refused: bool = False  # denied by the ACL (or $SYS): acknowledged, never published


@dataclass(frozen=True, slots=True)
class Refusal:
    """A limit the client broke mid-stream (over the receive maximum). It waits its turn in the
    inbox: what the client sent before it is handled and acknowledged first, so every message
    passed on got its PUBACK / PUBREC (a client resending the rest makes no duplicate); then the
    connection closes and nothing sent after it is handled."""

    why: str
    code: int


@dataclass(frozen=True, slots=True)
class AckAgain:
    """A resent QoS 2 PUBLISH of a message already passed on: PUBREC again once it is kept."""

    held: IncomingQos2
    ack: bytes


class Ended:
    """Set once a connection's teardown is over; what a takeover or a stop waits on.

    An asyncio.Event made only when someone waits: its waiter deque is about 600 bytes, and a
    fleet's connections are mostly never waited on (docs/benchmarks.md#fleet-scale: 3 KB per idle connection)."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None
        self._set = False

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            return
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()


class Connection(asyncio.Protocol):
    # Slots, and the queues below made only while they hold something: a fleet's idle
    # connection costs what it holds, not a dict and four empty deques (docs/benchmarks.md#fleet-scale).
    __slots__ = (
        "_pump_soon",
        "acks",
        "aliases",
        "broker",
        "bytes_in",
        "bytes_out",
        "cert_cn",
        "client_max_packet",
        "connacked",
        "connected_at",
        "decoder",
        "done",
        "inbox",
        "incoming_unacked",
        "keepalive_limit",
        "last_packet",
        "level",
        "lingering",
        "listener",
        "opened",
        "output_logged",
        "peername",
        "publish_in",
        "publish_out",
        "raw_pending",
        "reading_paused",
        "reason",
        "refusal",
        "send_window",
        "serving",
        "state",
        "transport",
        "turn_bytes",
        "turn_packets",
        "turn_spent",
        "watched_keepalive",
        "will",
        "writing_paused",
    )

    def __init__(self, broker: Core, listener: str = "tcp") -> None:
        self.broker = broker
        self.listener = listener  # which listener accepted it: tcp, ssl, ws, wss
        self.cert_cn: str | None = None  # TLS: the client certificate's common name
        limits = broker.limits
        self.transport: asyncio.Transport | None = None
        self.decoder = Decoder(limits.max_packet_size, bounds=_bounds(limits))
        self.level = 0
        self.state: SessionState | None = None
        self.will: Will | None = None
        self.peername = ""
        self.reason: str | None = None  # why the connection ended; None while it is open
        self.refusal: Refusal | None = None  # queued in the inbox: nothing read after it is handled
        self.inbox: deque[Any] | None = None  # made by _queue, dropped by _serve once empty
        self.raw_pending = 0  # packets queued undecided until the session exists
        self.serving: asyncio.Task[None] | None = None
        self.done = Ended()
        self.opened = self.last_packet = time.monotonic()
        self.keepalive_limit = 0.0
        self.watched_keepalive = False  # in the broker's deadlines for its keepalive (broker._sweep)
        self.acks: AckQueue | None = None  # made by the first ack waiting to be kept (acks.py)
        self.aliases: dict[int, str] | None = None  # 5.0 topic aliases, made by the first one
        self.send_window = limits.max_inflight
        self.client_max_packet = 0
        self.incoming_unacked = 0  # QoS 1/2 messages from the client not yet fully acknowledged
        # This client's own traffic (the API's client details): PUBLISH packets and MQTT bytes.
        self.publish_in = self.publish_out = self.bytes_in = self.bytes_out = 0
        self.connected_at = 0.0  # wall-clock time of its CONNACK 0
        self.reading_paused = self.writing_paused = False  # the inbox is full / the output buffer is
        self.turn_spent = False  # this turn's budget is spent: reading waits for the next turn
        # Packets handled and bytes written since its last pause for a turn: a connection yields
        # at least once every TURN_PACKETS / TURN_BYTES, however its input was split into reads.
        self.turn_packets = self.turn_bytes = 0
        self.output_logged = False
        self._pump_soon = False
        self.connacked = False
        self.lingering = False  # half-closed after a DISCONNECT, aborted after _LINGER

    # -- asyncio protocol --------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            host, port = peer[0], peer[1]
            self.peername = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        transport.set_write_buffer_limits(high=self.broker.limits.max_output_bytes)
        self.broker.accept(self)

    def data_received(self, data: bytes) -> None:
        if self.reason is not None:
            if self.reason == "normal":
                self._late_acks(data)
            return  # closing: what still comes is not read
        self.broker.traffic.bytes_received += len(data)
        self.bytes_in += len(data)
        if self.not_reading:  # handed more while paused (the frames of one WebSocket read): later
            self.decoder.keep(data)
            return
        self._take(data)

    def _take(self, data: bytes) -> None:
        """Decode and handle what the client sent, up to this turn's budget (TURN_PACKETS): the
        bytes past it wait in the decoder while the others are served (_spend_turn)."""
        try:
            packets = self.decoder.feed(data, TURN_PACKETS - self.turn_packets)
        except CodecError as error:
            for packet in error.packets:
                self._on_packet(packet)
            if isinstance(error, UnsupportedProtocolVersion):
                self.fail_connect(ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION)  # [MQTT-3.1.2-2]
                return
            self.broker.refused[_refusal(error)] += 1
            log.info("client %s: %s; closing", self.who(), error)
            if error.level == MQTT_5 and not self.connacked:  # a refused 5.0 CONNECT: say why
                self.level = MQTT_5
                self.fail_connect(error.reason)
                return
            self.close("closed", error.reason)
            return
        if packets:
            self.broker.traffic.packets_received += len(packets)
            self.turn_packets += len(packets)
            self.last_packet = time.monotonic()
            for packet in packets:
                self._on_packet(packet)
        if self.decoder.held or self.turn_packets >= TURN_PACKETS:
            self._spend_turn()

    def _spend_turn(self) -> None:
        """This turn's budget is spent: stop reading until the next loop turn (_next_turn)."""
        if self.turn_spent or self.reason is not None:
            return
        self.turn_spent = True
        self._reading()
        asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self.turn_spent = False
        self.turn_packets = self.turn_bytes = 0
        self._reading()

    def _late_acks(self, data: bytes) -> None:
        """After the client's DISCONNECT, take the PUBACKs and PUBCOMPs that still arrive.

        paho-mqtt sends the PUBACK of a message after its on_message callback returns, from its
        network thread, so a DISCONNECT sent meanwhile from the application's thread can overtake
        it; without this the acknowledged message would be sent again on the next connection.
        """
        try:
            packets = self.decoder.feed(data)
        except CodecError:
            return
        state = self.state
        for packet in packets:
            if state is not None and isinstance(packet, Puback | Pubcomp):
                message = state.inflight.get(packet.packet_id)
                if message is not None and (isinstance(packet, Pubcomp) or message.qos == 1):
                    state.acked(packet.packet_id)
                    if isinstance(packet, Puback):
                        self._post_receipt(MessageAcked, message)

    def eof_received(self) -> bool:
        return False  # close the transport: MQTT has no half-closed connections

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.reason is None:
            # A reset or a failed write (ECONNRESET, EPIPE, ETIMEDOUT): asyncio logs these only
            # in debug mode, so without this line a client cut off mid-flood left no trace.
            log.info(
                "client %s: connection lost: %s%s",
                self.who(),
                exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc),
                " (while its unread output held reading paused)" if self.writing_paused else "",
            )
        self.close("closed")

    def pause_writing(self) -> None:
        """The client has not taken `max_output_bytes`: stop delivering to it and stop reading
        from it (what it sends would be answered into the same buffer: PUBACKs, PINGRESPs) until
        the transport has written all but a quarter of it (resume_writing)."""
        if self.writing_paused:
            return
        self.writing_paused = True
        self.broker.output_pauses += 1
        if not self.output_logged:  # once per connection: a slow reader pauses often
            self.output_logged = True
            log.info(
                "client %s: %d bytes written and not read by the client (broker.max_output_bytes): "
                "reading from it paused until it reads",
                self.who(),
                self.transport.get_write_buffer_size() if self.transport is not None else 0,
            )
        self._reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self.last_packet = time.monotonic()  # time not spent reading does not count
        self._reading()
        self.pump()

    @property
    def not_reading(self) -> bool:
        """Reading from the socket is paused (full inbox, output the client has not taken, or
        this turn's budget spent): time that does not count against the keepalive."""
        return self.reading_paused or self.writing_paused or self.turn_spent

    def _reading(self) -> None:
        """Read from the socket unless the inbox is full, the client does not take its output or
        this turn's budget is spent; what an earlier turn left in the decoder goes first."""
        transport = self.transport
        if transport is None or self.reason is not None:
            return
        if not self.not_reading and self.decoder.held:
            self._take(b"")  # may spend the budget or fill the inbox again: then reading stays paused
            if self.reason is not None:
                return
        if self.not_reading:
            transport.pause_reading()
        else:
            transport.resume_reading()

    # -- reading -----------------------------------------------------------------

    def _on_packet(self, packet: Any) -> None:
        if self.reason is not None or self.refusal is not None:
            return
        if self.state is None or self.raw_pending:
            if type(packet) is not Connect:
                self.raw_pending += 1
            self._queue(packet)
            return
        item = self.handle(packet)
        if item is not None:
            self._queue(item)

    def handle(self, packet: Any) -> Any:
        """Answer what can be answered now; return the work item for the connection's task."""
        kind = type(packet)
        state = self.state
        assert state is not None
        if kind is Publish:
            return self._on_publish(packet, state)
        if kind is Puback:
            message = state.inflight.get(packet.packet_id)
            if message is not None and message.qos == 1:
                state.acked(packet.packet_id)
                if packet.reason_code < 0x80:  # 5.0: the receiver refused it; the flow ends, no ack
                    self._post_receipt(MessageAcked, message)
        elif kind is Pubrec:
            message = state.inflight.get(packet.packet_id)
            if message is not None and message.qos == 2 and not message.pubrec:
                if packet.reason_code >= 0x80:  # 5.0: the receiver refused it; the flow ends here
                    state.acked(packet.packet_id)
                    return None
                message.pubrec = True
                if message.seq:
                    state.touch()
                self._post_receipt(MessageAcked, message)
            code = 0 if message is not None else R.PACKET_IDENTIFIER_NOT_FOUND
            self.write(encode(Pubrel(packet.packet_id, code), self.level))
        elif kind is Pubrel:  # the message was passed on at PUBLISH: forget its id, complete
            held = state.incoming_qos2.pop(packet.packet_id, None)
            if held is not None:
                self.incoming_unacked -= 1
                if held.acked:
                    state.touch()  # a durable session's stored id goes: the client may reuse it
            code = 0 if held is not None else R.PACKET_IDENTIFIER_NOT_FOUND
            self.write(encode(Pubcomp(packet.packet_id, code), self.level))
        elif kind is Pubcomp:
            state.acked(packet.packet_id)
        elif kind is Pingreq:
            self.write(b"\xd0\x00")
        elif kind is Disconnect:
            self._on_disconnect(packet, state)
        elif kind in (Subscribe, Unsubscribe):
            return packet
        else:  # AUTH: enhanced authentication is not offered (5.0 4.12)
            self.close("closed", R.PROTOCOL_ERROR)
        return None

    def _on_publish(self, packet: Publish, state: SessionState) -> Any:
        traffic = self.broker.traffic
        traffic.publish_received += 1
        traffic.publish_bytes_received += len(packet.payload)
        self.publish_in += 1
        topic, props = packet.topic, packet.properties
        if self.level == MQTT_5 and props is not EMPTY:
            alias = props.topic_alias
            if alias is not None:
                if alias > TOPIC_ALIAS_MAXIMUM:
                    return self._refuse("topic alias over the maximum", R.TOPIC_ALIAS_INVALID)
                if topic:
                    if self.aliases is None:
                        self.aliases = {}
                    self.aliases[alias] = topic
                else:
                    topic = self.aliases.get(alias, "") if self.aliases is not None else ""
                    if not topic:
                        return self._refuse(f"unknown topic alias {alias}", R.PROTOCOL_ERROR)
                props = replace(props, topic_alias=None)
                if props == EMPTY:
                    props = EMPTY
        # The topic's levels were counted while it was decoded (codec/bounds.py), an aliased
        # topic's in the PUBLISH that set the alias.
        expires = 0.0
        if props.message_expiry_interval is not None:
            expires = time.monotonic() + props.message_expiry_interval
        qos, packet_id = packet.qos, packet.packet_id
        refused = not state.permissions.may_publish(topic)
        if refused:
            self.broker.refused["acl_publish_denied"] += 1
        if qos == 0:
            return Inbound(topic, packet.payload, 0, packet.retain, props, expires, refused=refused)
        ack_code = R.NOT_AUTHORIZED if refused and self.level == MQTT_5 else 0
        if qos == 1:
            ack = encode_puback(Puback(packet_id, ack_code), self.level)
        else:
            ack = encode(Pubrec(packet_id, ack_code), self.level)
            held = state.incoming_qos2.get(packet_id)
            if held is not None:  # a resent PUBLISH of a held packet id is the same message
                return AckAgain(held, ack)
        if self._over_receive_maximum(state, qos):
            self.broker.refused["receive_maximum"] += 1
            self.refusal = Refusal("over the receive maximum", R.RECEIVE_MAXIMUM_EXCEEDED)
            return self.refusal  # nothing of this PUBLISH is passed on
        if ack_code and qos == 2:
            # 5.0 section 4.3.3: a PUBREC with a reason code >= 0x80 ends the exchange (no PUBREL
            # follows), so the packet id is not held and takes no place in the receive maximum:
            # the client may reuse it at once for a new message [MQTT-4.3.3-4].
            return Inbound(topic, packet.payload, qos, packet.retain, props, expires, ack, packet_id, refused)
        self.incoming_unacked += 1
        if qos == 2:
            state.incoming_qos2[packet_id] = IncomingQos2()
        return Inbound(topic, packet.payload, qos, packet.retain, props, expires, ack, packet_id, refused)

    def _over_receive_maximum(self, state: SessionState, qos: int) -> bool:
        """One QoS 1/2 PUBLISH more than the broker allows in progress: 5.0 counts both against
        the Receive Maximum it announced (5.0 section 4.9); 3.1.1 announces none, and what is
        bounded there is the QoS 2 packet ids held until their PUBREL."""
        if self.level == MQTT_5:
            return self.incoming_unacked >= RECEIVE_MAXIMUM
        return qos == 2 and len(state.incoming_qos2) >= RECEIVE_MAXIMUM

    def _on_disconnect(self, packet: Disconnect, state: SessionState) -> None:
        if packet.reason_code != R.DISCONNECT_WITH_WILL_MESSAGE:
            self.will = None  # a normal DISCONNECT discards the will [MQTT-3.1.2-10]
        expiry = packet.properties.session_expiry_interval
        if expiry is not None:
            if state.expiry == 0 and expiry:
                self.close("closed", R.PROTOCOL_ERROR)  # 5.0 3.14.2.2.2
                return
            state.expiry = expiry
        self.close("normal")

    def _refuse(self, why: str, code: int) -> None:
        log.info("client %s: %s; closing", self.who(), why)
        self.close("closed", code)

    def _queue(self, item: Any) -> None:
        inbox = self.inbox
        if inbox is None:
            inbox = self.inbox = deque()
        inbox.append(item)
        if len(inbox) >= INBOX_SIZE and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self._reading()
        if self.serving is None:
            self.serving = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        """Hand the inbox to the broker, one item at a time, in arrival order."""
        broker = self.broker
        inbox = self.inbox
        try:
            while inbox:
                item = inbox.popleft()
                if self.reading_paused and len(inbox) < INBOX_SIZE // 2 and self.reason is None:
                    self.reading_paused = False
                    self.last_packet = time.monotonic()  # time not spent reading does not count
                    self._reading()
                kind = type(item)
                if kind is Inbound:
                    run = [item]
                    while inbox and type(inbox[0]) is Inbound and len(run) < PUBLISH_RUN:
                        run.append(inbox.popleft())
                    await broker.publish_inbound(self, run)
                elif item is END:
                    await broker.teardown(self)
                    return
                elif kind is Connect:
                    await broker.connect(self, item)
                elif kind is AckAgain:
                    await self.ack_when_kept(item.held.kept, item.ack)
                elif kind is Refusal:
                    if self.acks is not None:
                        await self.acks.drained()
                    self._refuse(item.why, item.code)  # END is queued now, or was when the connection ended
                    while inbox and inbox[0] is not END:
                        inbox.popleft()  # what came after it is not handled
                elif kind is Subscribe:
                    await broker.subscribe(self, item)
                elif kind is Unsubscribe:
                    await broker.unsubscribe(self, item)
                else:  # a packet that came before the session existed
                    self.raw_pending -= 1
                    if self.state is not None and self.reason is None:
                        decided = self.handle(item)
                        if decided is not None:
                            inbox.appendleft(decided)
        finally:
            self.serving = None
            if self.inbox:  # an item queued while the task was ending
                self.serving = asyncio.get_running_loop().create_task(self._serve())
            else:
                self.inbox = None

    # -- acknowledging -------------------------------------------------------------

    async def accepted(self, item: Inbound, kept: Kept) -> None:
        """The bridge has the event of `item`: acknowledge it once `kept` is done."""
        state = self.state
        if item.qos == 2 and state is not None and (held := state.incoming_qos2.get(item.packet_id)) is not None:
            held.kept = kept  # a resent PUBLISH of it is acknowledged once this is done
        if item.ack is not None:
            await self.ack_when_kept(kept, item.ack, item.qos)

    async def ack_when_kept(self, kept: Kept, ack: bytes, qos: int = 2) -> None:
        """Queue `ack` to go out once `kept` is done, after every ack queued before it."""
        if self.reason is not None:
            return  # closing: the client sends the message again on its next connection
        acks = self.acks
        if acks is None:
            acks = self.acks = AckQueue(UNACKED_LIMIT, self._acks_out, self._ack_lost)
        await acks.add(kept, ack, qos)

    def _acks_out(self, acks: list[bytes], pubacks: int) -> None:
        """Acknowledgements whose messages are kept (AckQueue): written, and the QoS 1 ones end
        their exchange (the client may send one more under the Receive Maximum)."""
        self.incoming_unacked -= pubacks
        self.write(b"".join(acks), len(acks))

    def _ack_lost(self) -> None:
        log.warning("client %s: a message was not kept; closing without acknowledging it", self.who())
        self.close("closed")

    # -- sending -------------------------------------------------------------------

    def write(self, data: bytes, packets: int = 1) -> None:
        transport = self.transport
        # Lingering, the socket is half-closed (write_eof): an answer due after the client's
        # DISCONNECT (a SUBACK of a SUBSCRIBE sent in the same write) has no one to go to.
        if transport is not None and not transport.is_closing() and not self.lingering:
            transport.write(data)
            traffic = self.broker.traffic
            traffic.packets_sent += packets
            traffic.bytes_sent += len(data)
            self.bytes_out += len(data)
            self.turn_bytes += len(data)
            if self.turn_bytes > TURN_BYTES:  # answers count against the budget too
                self._spend_turn()

    def pump(self) -> None:
        """Send queued messages soon (batched: one write per loop step)."""
        if not self._pump_soon and self.state is not None and self.connacked:
            self._pump_soon = True
            asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        self._pump_soon = False
        state, transport = self.state, self.transport
        if state is None or transport is None or self.reason is not None or state.conn is not self:
            return
        out: list[bytes] = []
        # Not paused means the transport holds at most max_output_bytes (it pauses past it), so
        # room >= 0 and at least one message goes out each turn: the pump always moves.
        room = self.broker.limits.max_output_bytes - transport.get_write_buffer_size()
        now = 0.0
        wants = self.broker.wants
        payload_bytes = 0
        while state.outbox and state.inflight.has_room(self.send_window) and room >= 0 and not self.writing_paused:
            message = state.pop()
            if message.expires:
                now = now or time.monotonic()
                if message.expires <= now:
                    continue  # 5.0 message expiry: never delivered once expired
            if message.qos:
                state.inflight.send(message)
            data = self._publish_bytes(message, dup=False, now=now)
            if self.client_max_packet and len(data) > self.client_max_packet:
                state.inflight.remove(message.packet_id)  # 5.0 3.1.2.25: discarded for this client
                continue
            out.append(data)
            payload_bytes += len(message.payload)
            room -= len(data)
            if wants(Hookpoint.MESSAGE_DELIVERED, state.clientid, message.topic):
                state.lane.post(self._receipt(MessageDelivered, message))
        if out:
            data = b"".join(out)
            transport.write(data)
            traffic = self.broker.traffic
            traffic.packets_sent += len(out)
            traffic.publish_sent += len(out)
            traffic.publish_bytes_sent += payload_bytes
            traffic.bytes_sent += len(data)
            self.publish_out += len(out)
            self.bytes_out += len(data)
        if room < 0 and out and state.outbox and not self.writing_paused:
            # This turn's room is used up but the transport took the bytes without pausing (the
            # kernel's socket buffer had space), so no resume_writing will come to restart the
            # pump: it goes on in the next loop step, after the other connections had theirs.
            # (The other stops have their own restart: an ack for the window, resume_writing.)
            self.pump()

    def resend_inflight(self) -> None:
        """[MQTT-4.4.0-1] resend unacknowledged PUBLISH (DUP) and PUBREL, in order."""
        state = self.state
        assert state is not None
        out = []
        for packet_id, message in state.inflight.items():
            if message.pubrec:
                out.append(encode(Pubrel(packet_id), self.level))
            else:
                out.append(self._publish_bytes(message, dup=True, now=time.monotonic()))
                self.broker.traffic.publish_sent += 1
                self.publish_out += 1
                self.broker.traffic.publish_bytes_sent += len(message.payload)
        if out:
            self.write(b"".join(out), len(out))

    def _publish_bytes(self, message: Outgoing, *, dup: bool, now: float) -> bytes:
        props = EMPTY
        if self.level == MQTT_5:
            props = message.properties
            if message.expires:
                props = replace(props, message_expiry_interval=max(0, int(message.expires - (now or time.monotonic()))))
            if message.subscription_ids:
                props = replace(props, subscription_identifier=message.subscription_ids)
        publish = Publish(message.topic, message.payload, message.qos, message.retain, dup, message.packet_id, props)
        return encode_publish(publish, self.level)

    def _post_receipt(self, kind: type[MessageAcked], message: Outgoing) -> None:
        state = self.state
        assert state is not None
        if self.broker.wants(Hookpoint.MESSAGE_ACKED, state.clientid, message.topic):
            state.lane.post(self._receipt(kind, message))

    def _receipt(self, kind: type[Any], message: Outgoing) -> Any:
        state = self.state
        assert state is not None
        return kind(
            msgid=message.msgid,
            clientid=state.clientid,
            username=state.username,
            from_clientid=message.from_clientid,
            topic=message.topic,
            qos=message.qos,
            payload=message.payload,
            retain=message.retain,
            node=self.broker.node,
            timestamp=time.time(),
            filters=message.filters,
            proto_ver=state.level,
            user_properties=message.properties.user_property,
        )

    # -- closing -------------------------------------------------------------------

    def close(self, reason: str, code: int | None = None) -> None:
        """End the connection; the first reason given is the one reported. `code`: the 5.0
        DISCONNECT reason sent first (after CONNACK only; a 3.1.1 client is just closed)."""
        if self.reason is None:
            self.reason = reason
            transport = self.transport
            if transport is not None and not transport.is_closing():
                if code is not None and self.level == MQTT_5 and self.connacked:
                    disconnect = encode(Disconnect(code), MQTT_5)
                    transport.write(disconnect)
                    self.broker.traffic.packets_sent += 1
                    self.broker.traffic.bytes_sent += len(disconnect)
                    self.bytes_out += len(disconnect)
                    self._linger(transport)
                elif reason == "normal":
                    self._linger(transport)  # late acks (see _late_acks), then close
                elif reason in ("closed", "refused") or code is not None:
                    transport.close()  # flush what is buffered (the PUBACK before a DISCONNECT)
                else:
                    transport.abort()
            if self.acks is not None:
                self.acks.close()
            self._queue(END)

    def _linger(self, transport: Any) -> None:
        """Closing with unread input would reset the connection, and a reset can discard the
        DISCONNECT before the client reads it: half-close, drain what still comes (ignored) for
        a moment, then close."""
        # TLS has no half-close: there the DISCONNECT just has the moment to reach the client.
        if transport.can_write_eof():
            try:
                transport.write_eof()
            except OSError:  # the peer is already gone (ENOTCONN): nothing to linger for
                transport.abort()
                return
        self.lingering = True
        if self.not_reading:
            transport.resume_reading()
        asyncio.get_running_loop().call_later(_LINGER, transport.abort)

    def fail_connect(self, code: int) -> None:
        """Refuse the CONNECT with a CONNACK carrying `code` (a 3.1.1 return code below 5.0)."""
        self.write(encode(Connack(False, code), self.level or 4))
        self.close("refused")

    def who(self) -> str:
        if self.state is not None:
            return repr(self.state.clientid)
        return self.peername or "(unknown)"

    def finish(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing() and not self.lingering:
            transport.close()


def _bounds(limits: Limits) -> Bounds:
    """What the decoder checks while it reads a packet (codec/bounds.py), from the broker's limits."""
    return Bounds(
        user_properties=limits.max_user_properties,
        topic_levels=limits.max_topic_levels,
        entries=limits.max_subscribe_entries,
    )


def _refusal(error: CodecError) -> str:
    """The /metrics name (limits.REFUSALS) a codec refusal is counted under."""
    if isinstance(error, TooManyUserProperties):
        return "user_properties"
    if isinstance(error, TooManyEntries):
        return "subscribe_entries"
    if isinstance(error, TooManyTopicLevels):
        return "topic_levels"
    return "packet_too_large" if isinstance(error, PacketTooLarge) else "malformed"
