"""One client's MQTT protocol in the embedded broker, with no socket: packets in; bytes to
write, work items for the broker and events out.

EMQX splits a client the same way (emqx_connection.erl holds the socket and its emqx_channel
state, the protocol, tested with no socket). Here a `Connection` owns one `Channel`, which holds
what the protocol knows of the client (its level, session, will, topic aliases, windows both
ways, its deadlines, the acknowledgements waiting for their messages to be kept) and decides what
each packet means: `handle` answers what can be answered at once (PUBREL, PUBCOMP, PINGRESP) and
returns what the broker must do (an `Inbound` message, a SUBSCRIBE); `deliveries` turns the
session's queue into PUBLISH packets for the socket side to write. Its bytes go out and its end
is carried out through a `Wire` (wire.py: connection.Connection; a recorder in tests/unit/test_channel.py,
which drives it with packets alone).

The broker (broker.py) and the API see a client as `client.Client`, which a Channel is: they
change it only through its methods (`attach`, `fail_connect`, `send`, `close`).

Acknowledgement means kept (docs/architecture.md#acknowledged-means-kept): a PUBACK / PUBREC goes
out once every rule's action for the message is committed or spooled, in the order the messages
came in [MQTT-4.6.0-2] (acks.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from bridge.brokers.embedded.acks import AckQueue
from bridge.brokers.embedded.aftercommit import Commit
from bridge.brokers.embedded.client import ClientDetails, Inbound, Peer
from bridge.brokers.embedded.codec import (
    EMPTY,
    MQTT_5,
    CodecError,
    Connack,
    Connect,
    ConnectReturnCode,
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
    publish_bytes,
)
from bridge.brokers.embedded.ended import Ended
from bridge.brokers.embedded.sessions import IncomingQos2, Outgoing
from bridge.brokers.embedded.stream import Kept
from bridge.brokers.embedded.wire import Hangup, Wire
from bridge.events import Hookpoint, MessageAcked, MessageDelivered

if TYPE_CHECKING:
    from collections import Counter

    from bridge.brokers.embedded.limits import Limits
    from bridge.brokers.embedded.sessions import SessionState
    from bridge.brokers.embedded.traffic import Traffic

log = logging.getLogger("bridge.brokers.embedded")

# Acknowledgements waiting for their messages to be kept, per connection; beyond this the
# message loop waits too, its inbox fills and reading stops: what waits stays bounded.
UNACKED_LIMIT = 1024
# QoS 1/2 messages a 5.0 client may have unacknowledged towards the broker (announced in CONNACK
# as Receive Maximum; a client over it is disconnected with 0x93). Acknowledgements wait until
# the message is kept, so this is what lets a publisher pipeline writes.
RECEIVE_MAXIMUM = UNACKED_LIMIT
# Topic aliases a 5.0 client may set towards the broker (announced in CONNACK).
TOPIC_ALIAS_MAXIMUM = 64
R = ReasonCode


class Host(Protocol):
    """What a channel asks of the broker (broker.Broker): its numbers, and whether the sink
    wants an event at all (counted as skipped when not)."""

    node: str
    limits: Limits
    refused: Counter[str]
    traffic: Traffic  # packets, PUBLISH packets and bytes in and out ($SYS/broker/...)

    def should_post(self, hookpoint: Hookpoint, clientid: str, topic: str | None = None) -> bool: ...


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


class Channel:
    """One client's protocol state and what each of its packets means (see the module's text).
    What the broker uses of it is `client.Client`; its socket side is a `Wire`."""

    __slots__ = (
        "_done",
        "acks",
        "aliases",
        "broker",
        "bytes_in",
        "bytes_out",
        "client_max_packet",
        "connacked",
        "connected_at",
        "incoming_unacked",
        "keepalive_limit",
        "level",
        "peer",
        "publish_in",
        "publish_out",
        "reason",
        "refusal",
        "send_window",
        "state",
        "watched_keepalive",
        "will",
        "wire",
    )

    def __init__(self, broker: Host, wire: Wire, peer: Peer) -> None:
        self.broker = broker
        self.wire = wire
        self.peer = peer
        self.level = 0
        self.state: SessionState | None = None
        self.will: Will | None = None
        self.reason: str | None = None  # why the connection ended; None while it is open
        self._done: Ended | None = None  # made when first asked for (done)
        self.refusal: Refusal | None = None  # queued in the inbox: nothing read after it is handled
        self.keepalive_limit = 0.0
        self.watched_keepalive = False  # in the broker's deadlines for its keepalive (check_deadline)
        self.acks: AckQueue | None = None  # made by the first ack waiting to be kept (acks.py)
        self.aliases: dict[int, str] | None = None  # 5.0 topic aliases, made by the first one
        self.send_window = broker.limits.max_inflight
        self.client_max_packet = 0
        self.incoming_unacked = 0  # QoS 1/2 messages from the client not yet fully acknowledged
        # This client's own traffic (the API's client details): PUBLISH packets and MQTT bytes.
        self.publish_in = self.publish_out = 0
        self.bytes_in = self.bytes_out = 0
        self.connected_at = 0.0  # wall-clock time of its CONNACK 0
        self.connacked = False

    @property
    def done(self) -> Ended:
        """Set by the broker once its teardown is over; made when first asked for (a takeover,
        the teardown, a stop): an idle connection of a fleet holds none."""
        done = self._done
        if done is None:
            done = self._done = Ended()
        return done

    def pump(self) -> None:
        """Its session has something to deliver (sessions.Link): the socket side sends it soon,
        as far as the socket takes it. A method rather than the wire's bound method kept in a
        slot: that was 64 bytes per connection."""
        self.wire.pump()

    def send(self, packet: Any) -> None:
        """Write one MQTT packet in the client's protocol level (a SUBACK, an UNSUBACK). A durable
        session's waits for the commit of the subscriptions it announces (aftercommit.py)."""
        state = self.state
        self.wire.write_ordered(encode(packet, self.level), 1, self._commit(state) if state is not None else None)

    def close(self, reason: str, code: int | None = None) -> None:
        """End the connection; the first reason given is the one reported. `code`: the 5.0
        DISCONNECT reason sent first (after CONNACK only; a 3.1.1 client is just closed)."""
        if self.reason is not None:
            return
        self.reason = reason
        if code is not None and self.level == MQTT_5 and self.connacked:
            self.wire.write(encode(Disconnect(code), MQTT_5))
            how = Hangup.LINGER
        elif reason == "normal":
            how = Hangup.LINGER  # the acks that still come are read (late_acks), then it closes
        elif reason in ("closed", "refused") or code is not None:
            how = Hangup.FLUSH
        else:
            how = Hangup.ABORT
        if self.acks is not None:
            self.acks.close()
        self.wire.hang_up(how)

    def abandon(self) -> None:
        self.wire.abandon()

    def details(self) -> ClientDetails:
        return ClientDetails(
            self.connected_at,
            round(self.keepalive_limit / 1.5),
            self.publish_in,
            self.publish_out,
            self.bytes_in,
            self.bytes_out,
        )

    # -- deadlines (the broker's wheel asks: broker._sweep) ----------------------------

    def check_deadline(self, now: float, connect_timeout: float) -> float | None:
        """Close the client if it is past its connect timeout (no CONNACK yet) or its keepalive
        (no complete packet for 1.5 x its keep alive while reading); else when to look again.
        None: nothing more to watch (closed, or this was the connect entry of a CONNACKed client)."""
        if self.reason is not None:
            return None
        wire, refused = self.wire, self.broker.refused
        if self.state is None:
            if wire.busy or now - wire.opened <= connect_timeout:
                return max(now, wire.opened + connect_timeout)  # its CONNECT is being handled
            refused["connect_timeout"] += 1
            if self.level:  # its CONNECT came; deciding it took the time
                log.info(
                    "connection from %s: its CONNECT was not answered within %.3g s (the login, a "
                    "password check or the user database, was still pending): closed",
                    self.peer.address,
                    connect_timeout,
                )
            else:
                log.info("connection from %s sent no CONNECT within %.0f s: closed", self.peer.address, connect_timeout)
            self.close("connect_timeout")
            return None
        if not self.watched_keepalive:
            return None  # its connect-timeout entry after the CONNECT; the keepalive has its own
        limit = self.keepalive_limit
        if not limit:
            self.watched_keepalive = False
            return None
        if wire.not_reading:  # time not spent reading does not count
            return now + limit
        if now - wire.last_packet > limit:
            refused["keepalive_timeout"] += 1
            log.info("client %s: no packet for %.1f s, closing (keepalive)", self.who(), now - wire.last_packet)
            self.close("keepalive_timeout", R.KEEP_ALIVE_TIMEOUT)
            return None
        return wire.last_packet + limit

    # -- CONNECT (the broker decides it: broker.connect) ------------------------------

    def speaks(self, level: int) -> None:
        """The protocol level of its CONNECT (read by the socket side): what its answers are
        encoded in from now on."""
        self.level = level

    def attach(self, state: SessionState, packet: Connect, connack: Connack, keepalive: float) -> float | None:
        """The CONNECT is accepted: the session is this client's, its will is kept, its 5.0
        limits towards it apply (Receive Maximum, Maximum Packet Size), CONNACK goes out, then
        what was in flight again [MQTT-4.4.0-1] and, soon, its queue. Its keepalive starts
        (`keepalive`: seconds without a packet before it is closed; 0: none): returns when it
        falls due, for the broker's deadline wheel (None: nothing to watch)."""
        self.state, self.will = state, packet.will
        self.keepalive_limit = keepalive
        if packet.protocol_level == MQTT_5:
            props = packet.properties
            if props.receive_maximum is not None:
                self.send_window = min(self.broker.limits.max_inflight, props.receive_maximum)
            self.client_max_packet = props.maximum_packet_size or 0
        self.connacked = True
        self.connected_at = time.time()
        if state.inflight or not state.outbox:
            self.wire.write(encode(connack, self.level))
            self._resend_inflight()
            self.pump()
        else:  # the queue's first turn goes with the CONNACK: one write, one segment to read
            self.wire.pump_now(encode(connack, self.level))
        if not keepalive:
            return None
        self.watched_keepalive = True
        return self.wire.last_packet + keepalive

    def fail_connect(self, code: int) -> None:
        """Refuse the CONNECT with a CONNACK carrying `code` (a 3.1.1 return code below 5.0)."""
        self.wire.write(encode(Connack(False, code), self.level or 4))
        self.close("refused")

    def who(self) -> str:
        if self.state is not None:
            return repr(self.state.clientid)
        return self.peer.address or "(unknown)"

    # -- packets in --------------------------------------------------------------------

    def refuse_bad_packet(self, error: CodecError) -> None:
        """The decoder refused what the client sent (malformed, or over a limit): counted, and
        the connection ends, with a CONNACK or a 5.0 DISCONNECT saying why where one may go."""
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

    def handle(self, packet: Any) -> Any:
        """Answer what can be answered now; return the work item for the connection's task
        (an Inbound message, AckAgain, a Refusal, a SUBSCRIBE / UNSUBSCRIBE) or None."""
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
            # a PUBREC for a QoS 1 message is for no exchange the broker has under that id
            code = 0 if message is not None and message.qos == 2 else R.PACKET_IDENTIFIER_NOT_FOUND
            # After the PUBREC is stored: the PUBLISH is never sent again after its PUBREL (aftercommit.py)
            self.wire.write_ordered(encode(Pubrel(packet.packet_id, code), self.level), 1, self._commit(state))
        elif kind is Pubrel:  # the message was passed on at PUBLISH: forget its id, complete
            held = state.release_incoming_qos2(packet.packet_id)
            stored = False
            if held is not None:
                self.incoming_unacked -= 1
                if held.acked:
                    state.touch()  # a durable session's stored id goes: the client may reuse it
                    stored = True
            code = 0 if held is not None else R.PACKET_IDENTIFIER_NOT_FOUND
            pubcomp = encode(Pubcomp(packet.packet_id, code), self.level)
            if stored:  # once the id is gone from the store too (aftercommit.py)
                self.wire.write_ordered(pubcomp, 1, self._commit(state))
            else:
                self.wire.write(pubcomp)
        elif kind is Pubcomp:
            if _completes(state.inflight.get(packet.packet_id)):
                state.acked(packet.packet_id)
        elif kind is Pingreq:
            self.wire.write(b"\xd0\x00")
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
                    return self.refuse("topic alias over the maximum", R.TOPIC_ALIAS_INVALID)
                if topic:
                    if self.aliases is None:
                        self.aliases = {}
                    self.aliases[alias] = topic
                else:
                    topic = self.aliases.get(alias, "") if self.aliases is not None else ""
                    if not topic:
                        return self.refuse(f"unknown topic alias {alias}", R.PROTOCOL_ERROR)
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
            state.hold_incoming_qos2(packet_id, IncomingQos2())
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

    def refuse(self, why: str, code: int) -> None:
        """The client broke a limit mid-stream: logged, and closed with `code` (5.0 DISCONNECT)."""
        log.info("client %s: %s; closing", self.who(), why)
        self.close("closed", code)

    def late_acks(self, packets: list[Any]) -> None:
        """After the client's DISCONNECT, take the PUBACKs and PUBCOMPs that still arrive.

        paho-mqtt sends the PUBACK of a message after its on_message callback returns, from its
        network thread, so a DISCONNECT sent meanwhile from the application's thread can overtake
        it; without this the acknowledged message would be sent again on the next connection.
        """
        state = self.state
        for packet in packets:
            if state is not None and isinstance(packet, Puback | Pubcomp):
                message = state.inflight.get(packet.packet_id)
                if isinstance(packet, Pubcomp):
                    if _completes(message):
                        state.acked(packet.packet_id)
                elif message is not None and message.qos == 1:
                    state.acked(packet.packet_id)
                    self._post_receipt(MessageAcked, message)

    # -- acknowledging ----------------------------------------------------------------

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
        self.wire.write(b"".join(acks), len(acks))

    def _ack_lost(self) -> None:
        log.warning("client %s: a message was not kept; closing without acknowledging it", self.who())
        self.close("closed")

    # -- messages out ------------------------------------------------------------------

    def deliveries(self, room: int) -> tuple[list[bytes], int, Commit | None]:
        """The PUBLISH packets of the session's queued messages that go out now: as many as its
        in-flight window allows and `room` bytes hold (at least one while room >= 0); with the
        payload bytes they carry, and the commit they wait for (a QoS 2 message of a durable
        session: aftercommit.py; None: none). message.delivered is posted for each."""
        state = self.state
        assert state is not None
        out: list[bytes] = []
        now = 0.0
        should_post = self.broker.should_post
        payload_bytes = 0
        stored_ids = False  # a QoS 2 message of a durable session got its packet id
        moved = False  # a stored message left the queue: the session's position moved
        while state.outbox and state.inflight.has_room(self.send_window) and room >= 0:
            message = state.pop()
            moved = moved or message.seq != 0
            if message.expires:
                now = now or time.monotonic()
                if message.expires <= now:
                    continue  # 5.0 message expiry: never delivered once expired
            if message.qos:
                state.inflight.send(message)
                if message.qos == 2 and message.seq:
                    stored_ids = True
            data = self._publish_bytes(message, dup=False, now=now)
            if self.client_max_packet and len(data) > self.client_max_packet:
                state.inflight.remove(message.packet_id)  # 5.0 3.1.2.25: discarded for this client
                continue
            out.append(data)
            payload_bytes += len(message.payload)
            room -= len(data)
            if should_post(Hookpoint.MESSAGE_DELIVERED, state.clientid, message.topic):
                state.stream.post(self._receipt(MessageDelivered, message))
        if moved:
            state.touch()
        return out, payload_bytes, self._commit(state) if stored_ids else None

    @staticmethod
    def _commit(state: SessionState) -> Commit | None:
        """What a packet announcing the state of a durable session waits for (aftercommit.py)."""
        journal = state.journal
        return journal.committed if journal is not None and state.durable else None

    def _resend_inflight(self) -> None:
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
        if out:  # after what its window's last state still waits for (a reconnect within a commit)
            self.wire.write_ordered(b"".join(out), len(out), self._commit(state))

    def _publish_bytes(self, message: Outgoing, *, dup: bool, now: float) -> bytes:
        props = EMPTY
        if self.level == MQTT_5:
            props = message.properties
            if message.expires:
                props = replace(props, message_expiry_interval=max(0, int(message.expires - (now or time.monotonic()))))
            if message.subscription_ids:
                props = replace(props, subscription_identifier=message.subscription_ids)
        return publish_bytes(
            message.topic, message.payload, message.qos, message.retain, dup, message.packet_id, props, self.level
        )

    def _post_receipt(self, kind: type[MessageAcked], message: Outgoing) -> None:
        state = self.state
        assert state is not None
        if self.broker.should_post(Hookpoint.MESSAGE_ACKED, state.clientid, message.topic):
            state.stream.post(self._receipt(kind, message))

    def _receipt(self, kind: type[Any], message: Outgoing) -> Any:
        state = self.state
        assert state is not None
        # Positional, in the order of the receipt's fields, as flows.py builds message.publish
        # (keywords from compiled code cost a dict per call; the same tests hold every field).
        return kind(
            message.msgid,  # msgid
            state.clientid,  # clientid
            state.username,  # username
            message.from_clientid,  # from_clientid
            message.topic,  # topic
            message.qos,  # qos
            message.payload,  # payload
            message.retain,  # retain
            self.broker.node,  # node
            time.time(),  # timestamp
            message.filters,  # filters
            state.level,  # proto_ver
            message.properties.user_property,  # user_properties
        )


def _completes(message: Outgoing | None) -> bool:
    """Whether a PUBCOMP ends the exchange of the message in flight under its packet id: a QoS 2
    one whose PUBREC came (MQTT 4.3.3). A PUBCOMP for anything else (a QoS 1 message sent under
    an id a stale exchange of the client's used) must not take that message out of the window
    unacknowledged."""
    return message is not None and message.qos == 2 and message.pubrec


def _refusal(error: CodecError) -> str:
    """The /metrics name (limits.REFUSALS) a codec refusal is counted under."""
    if isinstance(error, TooManyUserProperties):
        return "user_properties"
    if isinstance(error, TooManyEntries):
        return "subscribe_entries"
    if isinstance(error, TooManyTopicLevels):
        return "topic_levels"
    return "packet_too_large" if isinstance(error, PacketTooLarge) else "malformed"
