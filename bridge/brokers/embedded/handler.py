"""One client connection: amqtt's broker protocol handler with the bridge's flows.

Overridden amqtt 0.12.1 `ProtocolHandler` / `BrokerProtocolHandler` methods:

- `start()`: amqtt's runs `_retry_deliveries()`, which replays in-flight
  messages through flows with 5-10 s timeouts and blocks until they finish;
  here the reader, the sender and the keepalive watchdog start, and the
  sender replays the in-flight window itself (DUP=1, PUBREL for QoS 2).
- `_reader_loop()`: amqtt's spawns one task per packet (no back-pressure,
  no ordering guarantee between packet handlers) and never enforces the
  keepalive (its broker `handle_read_timeout()` is a no-op). Here packets
  are handled one after another, a full inbox stops reading from the socket,
  and a watchdog closes the connection after 1.5x the keepalive.
- incoming QoS 2: amqtt waits for PUBREL inside a per-message task whose
  waiter is lost on reconnect (the resent PUBREL is then never completed);
  here the message is passed on at PUBLISH (the specification's "method B"),
  its packet id stays in the session until PUBREL, and a resent PUBLISH with
  that id is acknowledged again, not passed on again.
- acknowledgements: amqtt sends PUBACK / PUBREC on receipt; here each waits
  until the bridge kept the message (every rule's action committed or
  spooled, SPEC 6.3), in the order the messages came in [MQTT-4.6.0-2].
- outgoing QoS 1/2: amqtt discards a message after 5 s without PUBACK /
  PUBREC; here messages stay in the session's in-flight window until acked
  or the session is discarded, and each ack maps back to its msgid.
- `stop()`: amqtt's drains the writer before closing (a client that does not
  read blocks it forever); here it is `finish()`: the transport is aborted.
- `_retry_deliveries()`: never called (see `start()`); the sender replays.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from amqtt.adapters import StreamWriterAdapter
from amqtt.errors import AMQTTError, MQTTError, NoDataError
from amqtt.mqtt import packet_dict
from amqtt.mqtt.packet import (
    DISCONNECT,
    PINGREQ,
    PUBACK,
    PUBCOMP,
    PUBLISH,
    PUBREC,
    PUBREL,
    SUBSCRIBE,
    UNSUBSCRIBE,
    MQTTFixedHeader,
)
from amqtt.mqtt.pingresp import PingRespPacket
from amqtt.mqtt.protocol.broker_handler import BrokerProtocolHandler
from amqtt.mqtt.puback import PubackPacket
from amqtt.mqtt.pubcomp import PubcompPacket
from amqtt.mqtt.publish import PublishPacket
from amqtt.mqtt.pubrec import PubrecPacket
from amqtt.mqtt.pubrel import PubrelPacket

from bridge.brokers.embedded.lane import Kept
from bridge.brokers.embedded.sessions import IncomingQos2, Outgoing, SessionState
from bridge.events import MessageAcked, MessageDelivered
from bridge.topics import topic_name_error

log = logging.getLogger("bridge.brokers.embedded")

# Packets read ahead of the client's message loop before reading stops.
INBOX_SIZE = 256
# Acknowledgements waiting for their messages to be kept, per connection; beyond this the
# message loop waits too, its inbox fills and reading stops: what waits stays bounded.
UNACKED_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class Inbound:
    """An application message the client published (QoS 2: once released)."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    # PUBACK (QoS 1) or PUBREC (QoS 2), sent only once the bridge kept the message (SPEC 6.3).
    ack: Any = None
    packet_id: int = 0


@dataclass(frozen=True, slots=True)
class AckAgain:
    """A resent QoS 2 PUBLISH of a message already passed on: PUBREC again once it is kept."""

    held: IncomingQos2
    ack: Any


class BridgeWriter(StreamWriterAdapter):  # type: ignore[misc]
    """amqtt's stream writer adapter, plus closing without draining first."""

    is_closed: bool

    def shut(self, *, graceful: bool) -> None:
        if self.is_closed:
            return
        self.is_closed = True  # amqtt's adapter drops writes from now on
        transport = self._writer.transport
        if graceful:
            transport.close()  # flush what is buffered (the PUBACK before a DISCONNECT)
        else:
            transport.abort()


class BridgeHandler(BrokerProtocolHandler):  # type: ignore[misc]
    """A client connection; `state` is the session it serves while connected."""

    def __init__(self, plugins_manager: Any, session: Any = None, loop: Any = None) -> None:
        super().__init__(plugins_manager, session, loop)
        self.state: SessionState | None = None
        self.node = ""
        self.peername = ""
        self.reason: str | None = None
        self.inbox: asyncio.Queue[Inbound | Any | None] = asyncio.Queue(INBOX_SIZE)
        self.done = asyncio.Event()
        self.task: asyncio.Task[Any] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._watchdog: asyncio.TimerHandle | None = None
        self._limit = 0.0
        self._last_read = 0.0  # when the reader started waiting for the next packet
        self._waiting = False
        self.acks: deque[tuple[Kept, Any]] = deque()  # (kept future, ack packet), in arrival order
        self._acks_changed = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Start reading, sending and the keepalive watchdog (replaces amqtt's start)."""
        state = self._state
        loop = asyncio.get_running_loop()
        if self.session.keep_alive > 0:
            self._limit = self.session.keep_alive * 1.5  # [MQTT-3.1.2-24]
            self._watchdog = loop.call_later(self._limit, self._check_keepalive)
        self._tasks = [
            asyncio.create_task(self._reader_loop(), name=f"hookbridge-read-{state.clientid}"),
            asyncio.create_task(self._sender_loop(), name=f"hookbridge-send-{state.clientid}"),
            asyncio.create_task(self._acker_loop(), name=f"hookbridge-ack-{state.clientid}"),
        ]

    def close(self, reason: str) -> None:
        """End the connection; the first reason given is the one reported."""
        if self.reason is None:
            self.reason = reason
        self._acks_changed.set()  # a message loop waiting for room in `acks` stops waiting
        if isinstance(self.writer, BridgeWriter):
            self.writer.shut(graceful=self.reason == "normal")

    async def stop(self) -> None:
        await self.finish()

    async def finish(self) -> None:
        """Stop the connection's tasks once its message loop has ended."""
        self.close("closed")
        if self._watchdog is not None:
            self._watchdog.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def _state(self) -> SessionState:
        if self.state is None:
            raise AMQTTError("connection has no session")
        return self.state

    def _check_keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        # Only time spent waiting for the client counts: while the reader is held
        # up by back-pressure, the client's PINGREQ may be sitting unread.
        idle = loop.time() - self._last_read if self._waiting else 0.0
        if idle >= self._limit:
            log.info("client %r: no packet for %.1f s, closing (keepalive)", self._state.clientid, idle)
            self.close("keepalive_timeout")
        else:
            self._watchdog = loop.call_later(self._limit - idle, self._check_keepalive)

    async def send(self, packet: Any) -> None:
        writer = self.writer
        if writer is None or writer.is_closed:
            return
        try:
            writer.write(packet.to_bytes())
            await writer.drain()
        except (ConnectionError, OSError) as exc:
            log.debug("write to %s failed: %s", self.peername, exc)
            self.close("closed")

    # -- reading ---------------------------------------------------------------

    async def _reader_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._last_read, self._waiting = loop.time(), True
                header = await MQTTFixedHeader.from_stream(self.reader)
                self._waiting = False
                if header is None:
                    break  # EOF
                packet_type = packet_dict.get(header.packet_type)
                if packet_type is None:
                    log.info("client %r: reserved packet type, closing", self._state.clientid)
                    break
                packet = await packet_type.from_stream(self.reader, fixed_header=header)
                if not await self._dispatch(packet):
                    break
        except (MQTTError, AMQTTError, NoDataError, ValueError, ConnectionError, OSError) as exc:
            log.info("client %r: closing on bad input: %r", self._state.clientid, exc)
        self.close("closed")
        await self.inbox.put(None)  # tells the message loop the connection ended

    async def _dispatch(self, packet: Any) -> bool:
        """Handle one packet; False ends the connection."""
        kind = packet.fixed_header.packet_type
        if kind == PUBLISH:
            return await self._on_publish(packet)
        if kind == PUBACK:
            await self._on_puback(packet.variable_header.packet_id)
        elif kind == PUBREC:
            await self._on_pubrec(packet.packet_id)
        elif kind == PUBREL:  # the message was passed on at PUBLISH: forget its id, complete
            self._state.incoming_qos2.pop(packet.packet_id, None)
            await self.send(PubcompPacket.build(packet.packet_id))
        elif kind == PUBCOMP:
            self._state.acked(packet.packet_id)
        elif kind in (SUBSCRIBE, UNSUBSCRIBE):
            await self.inbox.put(packet)
        elif kind == PINGREQ:
            await self.send(PingRespPacket.build())
        elif kind == DISCONNECT:
            self.close("normal")
            return False
        else:  # CONNECT twice, or a packet only a server sends [MQTT-3.1.0-2]
            log.info("client %r: unexpected packet type %d, closing", self._state.clientid, kind)
            return False
        return True

    async def _on_publish(self, packet: PublishPacket) -> bool:
        topic, qos = packet.topic_name, packet.qos
        error = topic_name_error(topic or "")
        if error or qos not in (0, 1, 2) or (qos and packet.packet_id is None):
            log.info("client %r: bad PUBLISH (%s), closing", self._state.clientid, error or f"qos {qos}")
            return False
        payload, retain = bytes(packet.data or b""), packet.retain_flag
        if qos == 0:
            await self.inbox.put(Inbound(topic, payload, 0, retain))
        elif qos == 1:
            await self.inbox.put(Inbound(topic, payload, 1, retain, PubackPacket.build(packet.packet_id)))
        else:
            packet_id, pubrec = packet.packet_id, PubrecPacket.build(packet.packet_id)
            held = self._state.incoming_qos2.get(packet_id)
            if held is not None:  # a resent PUBLISH of a held packet id is the same message
                await self.inbox.put(AckAgain(held, pubrec))
            else:
                self._state.incoming_qos2[packet_id] = IncomingQos2()
                await self.inbox.put(Inbound(topic, payload, 2, retain, pubrec, packet_id))
        return True

    async def _on_puback(self, packet_id: int) -> None:
        state = self._state
        message = state.inflight.get(packet_id)
        if message is None or message.qos != 1:
            log.debug("client %r: PUBACK for unknown packet id %d", state.clientid, packet_id)
            return
        state.acked(packet_id)
        await state.lane.emit(self._event(MessageAcked, message))

    async def _on_pubrec(self, packet_id: int) -> None:
        state = self._state
        message = state.inflight.get(packet_id)
        if message is not None and message.qos == 2 and not message.pubrec:
            message.pubrec = True
            acked = state.lane.post(self._event(MessageAcked, message), wait=True)
            await self.send(PubrelPacket.build(packet_id))
            if acked is not None:
                await acked
        else:
            await self.send(PubrelPacket.build(packet_id))

    # -- acknowledging -----------------------------------------------------------

    async def accepted(self, item: Inbound, kept: Kept) -> None:
        """The bridge has the event of `item`: acknowledge it once `kept` is done."""
        if item.qos == 2 and (held := self._state.incoming_qos2.get(item.packet_id)) is not None:
            held.kept = kept  # a resent PUBLISH of it is acknowledged once this is done
        await self.ack_when_kept(kept, item.ack)

    async def ack_when_kept(self, kept: Kept, packet: Any) -> None:
        """Queue `packet` to go out once `kept` is done, after every ack queued before it."""
        while len(self.acks) >= UNACKED_LIMIT and self.reason is None:
            self._acks_changed.clear()
            await self._acks_changed.wait()
        if self.reason is not None:
            return  # closing: the client sends the message again on its next connection
        self.acks.append((kept, packet))
        self._acks_changed.set()

    async def _acker_loop(self) -> None:
        while True:
            if not self.acks:
                self._acks_changed.clear()
                await self._acks_changed.wait()
                continue
            kept, packet = self.acks[0]
            if kept is not None and not kept.done():
                await asyncio.wait([kept])  # not `await kept`: cancelling this task must not cancel it
            self.acks.popleft()
            self._acks_changed.set()
            if kept is not None and kept.cancelled():
                log.warning("client %r: a message was not kept; closing without acknowledging it", self._state.clientid)
                self.close("closed")
                return
            await self.send(packet)

    # -- sending ---------------------------------------------------------------

    async def _sender_loop(self) -> None:
        state = self._state
        # [MQTT-4.4.0-1] resend unacknowledged PUBLISH (DUP) and PUBREL, in order.
        for packet_id, message in list(state.inflight.items()):
            if state.inflight.get(packet_id) is not message:
                continue
            if message.pubrec:
                await self.send(PubrelPacket.build(packet_id))
            else:
                await self.send(self._publish_packet(message, dup=True))
        while True:
            if not state.can_send():
                state.changed.clear()
                await state.changed.wait()
                continue
            message = state.outbox.popleft()
            if message.qos:
                message.packet_id = state.next_packet_id()
                state.inflight[message.packet_id] = message
            await state.lane.emit(self._event(MessageDelivered, message))
            await self.send(self._publish_packet(message, dup=False))

    @staticmethod
    def _publish_packet(message: Outgoing, *, dup: bool) -> PublishPacket:
        return PublishPacket.build(
            message.topic, message.payload, message.packet_id or None, dup, message.qos, message.retain
        )

    def _event(self, kind: type[Any], message: Outgoing) -> Any:
        state = self._state
        return kind(
            msgid=message.msgid,
            clientid=state.clientid,
            username=state.username,
            from_clientid=message.from_clientid,
            topic=message.topic,
            qos=message.qos,
            payload=message.payload,
            retain=message.retain,
            node=self.node,
            timestamp=time.time(),
            filters=message.filters,
        )
