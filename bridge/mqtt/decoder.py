"""An incremental MQTT decoder for one connection's byte stream.

Feed it the chunks `asyncio.Protocol.data_received` gets; it returns the complete packets and
keeps at most one partial packet. Every check is done before a packet is returned, so a packet
that breaks a rule is never half-handled: the decoder raises a `CodecError` naming the MQTT 5.0
reason code to disconnect with, and is unusable afterwards (the connection must be closed).

Framing rules enforced (OASIS 3.1.1 section 2 and 5.0 section 2):
- remaining length at most 4 bytes and in its shortest form;
- `max_packet_size` (the whole packet, header included) checked as soon as the fixed header is
  read, before any of the body is buffered;
- the content must fill the declared length exactly: a field that runs past it, or bytes left
  after the last field, make the packet malformed;
- reserved flag bits of the fixed header, per packet type; PUBLISH QoS 3 and DUP on QoS 0.

The protocol level is learnt from CONNECT (server side: the first packet must be CONNECT and a
second one is a protocol error), or given up front (client side, or a test).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Literal

from bridge.mqtt import properties, wire
from bridge.mqtt.bodies import PARSERS, Parser
from bridge.mqtt.errors import CodecError, MalformedPacket, PacketTooLarge, ProtocolError
from bridge.mqtt.kinds import PacketType
from bridge.mqtt.packets import MQTT_5, Connect, Packet, Publish
from bridge.mqtt.properties import EMPTY

P = PacketType
_FLAGS: dict[int, int] = {kind: 0x02 if kind in (P.PUBREL, P.SUBSCRIBE, P.UNSUBSCRIBE) else 0 for kind in P}
_RECEIVED_BY = {
    "server": frozenset(P) - {P.CONNACK, P.SUBACK, P.UNSUBACK, P.PINGRESP},
    "client": frozenset(P) - {P.CONNECT, P.SUBSCRIBE, P.UNSUBSCRIBE, P.PINGREQ},
}
_BAD_ASCII_TOPIC = re.compile(rb"[\x00-\x1f\x7f+#]")
Handler = Callable[[bytes, int, int, int], Packet]
DEFAULT_MAX_PACKET_SIZE = 268_435_460
"""The largest packet MQTT can frame: 1 + 4 length bytes + 268,435,455."""


class Decoder:
    """Decodes one direction of one connection. `role` is the side doing the decoding: a server
    refuses packets only a server sends (CONNACK, SUBACK, ...) and a client's PUBLISH carrying a
    subscription identifier; a client refuses the reverse."""

    __slots__ = ("_failed", "_handlers", "_partial", "_received", "_server", "_wanted", "level", "max_packet_size")

    def __init__(
        self,
        max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
        level: int = 0,
        role: Literal["server", "client"] = "server",
    ) -> None:
        self.max_packet_size = max_packet_size
        self.level = level
        """The protocol level (3, 4 or 5); 0 until CONNECT is decoded."""
        self._server = role == "server"
        self._received = _RECEIVED_BY[role]
        self._partial = bytearray()
        self._wanted = 0
        self._failed = False
        self._handlers = self._dispatch()

    @property
    def buffered(self) -> int:
        """Bytes held of the one partial packet."""
        return len(self._partial)

    def feed(self, data: bytes) -> list[Packet]:
        """The packets `data` completes, in order. Raises CodecError on the first bad packet, with
        the valid packets before it in `error.packets`."""
        if self._failed:
            raise ProtocolError("the stream already broke the protocol")
        if self._partial:
            self._partial += data
            if len(self._partial) < self._wanted:
                return []
            buf = bytes(self._partial)
            self._partial = bytearray()
        else:
            buf = bytes(data)
        packets: list[Packet] = []
        pos, size, wanted = 0, len(buf), 0
        try:
            while pos < size:
                if pos + 1 >= size:
                    break
                length = buf[pos + 1]
                body = pos + 2
                if length > 127:
                    length, body = self._long_length(buf, pos + 1, size)
                    if body < 0:
                        break
                wanted = body - pos + length
                if wanted > self.max_packet_size:
                    raise PacketTooLarge(f"packet of {wanted} bytes is over the limit of {self.max_packet_size}")
                end = body + length
                if end > size:
                    break
                wanted = 0
                packet = self._handlers[buf[pos]](buf, body, end, self.level)
                packets.append(packet)
                if type(packet) is Connect:
                    self.level = packet.protocol_level
                    self._handlers = self._dispatch()
                pos = end
        except CodecError as error:
            self._failed = True
            error.packets = packets
            raise
        if pos < size:
            self._partial = bytearray(memoryview(buf)[pos:])
            self._wanted = wanted
        return packets

    @staticmethod
    def _long_length(buf: bytes, pos: int, size: int) -> tuple[int, int]:
        """(remaining length, body start) from the varint at `pos`; (0, -1) if it is incomplete."""
        value = 0
        for index in range(4):
            if pos + index >= size:
                return 0, -1
            byte = buf[pos + index]
            value |= (byte & 0x7F) << (7 * index)
            if not byte & 0x80:
                if byte == 0:
                    raise MalformedPacket("remaining length is not in its shortest form")
                return value, pos + index + 1
        raise MalformedPacket("remaining length is longer than 4 bytes")

    def _dispatch(self) -> list[Handler]:
        """A handler for each possible first byte at the current protocol level: the type and the
        header flags are checked by one list index per packet."""
        handlers: list[Handler] = []
        for first in range(256):
            kind, flags = first >> 4, first & 0x0F
            handlers.append(self._handler(kind, flags))
        return handlers

    def _handler(self, kind: int, flags: int) -> Handler:
        if kind == 0 or (kind == P.AUTH and self.level and self.level < MQTT_5):
            return _refuse(MalformedPacket(f"packet type {kind} is reserved"))
        name = P(kind).name
        if not self.level and self._server and kind != P.CONNECT:
            return _refuse(ProtocolError(f"first packet is {name}, not CONNECT"))
        if kind not in self._received:
            return _refuse(ProtocolError(f"{name} is never sent to a {'server' if self._server else 'client'}"))
        if kind == P.CONNECT and self.level:
            return _refuse(ProtocolError("second CONNECT on one connection"))
        if kind == P.PUBLISH:
            if not self.level:
                return _refuse(ProtocolError("PUBLISH before the protocol level is known"))
            return functools.partial(self._publish, flags)
        if flags != _FLAGS[kind]:
            return _refuse(MalformedPacket(f"{name} with reserved header flags 0x{flags:X}"))
        return functools.partial(_checked, PARSERS[kind], name)

    def _publish(self, flags: int, buf: bytes, pos: int, end: int, level: int) -> Publish:
        qos = flags >> 1 & 3
        if qos == 3:
            raise MalformedPacket("PUBLISH with QoS 3")
        if not qos and flags & 0x08:
            raise MalformedPacket("PUBLISH at QoS 0 with DUP set")
        if pos + 2 > end:
            raise MalformedPacket("PUBLISH ends before its topic")
        stop = pos + 2 + (buf[pos] << 8 | buf[pos + 1])
        if stop > end:
            raise MalformedPacket(f"PUBLISH topic declares {stop - pos - 2} bytes but the packet holds {end - pos - 2}")
        raw = buf[pos + 2 : stop]
        if raw.isascii() and _BAD_ASCII_TOPIC.search(raw) is None:
            topic = raw.decode("ascii")
        else:
            topic = wire.text(raw)
            if "+" in topic or "#" in topic:
                raise MalformedPacket(f"PUBLISH topic {topic!r} contains a wildcard")
        pos = stop
        packet_id = 0
        if qos:
            if pos + 2 > end:
                raise MalformedPacket("PUBLISH ends inside its packet identifier")
            packet_id = buf[pos] << 8 | buf[pos + 1]
            if not packet_id:
                raise ProtocolError("PUBLISH at QoS > 0 with packet identifier 0")
            pos += 2
        props = EMPTY
        if level == MQTT_5:
            if pos < end and buf[pos] == 0:
                pos += 1
            else:
                props, pos = properties.decode(buf, pos, end, P.PUBLISH)
            if self._server and props.subscription_identifier:
                raise ProtocolError("PUBLISH from a client with a subscription identifier")
            if not topic and props.topic_alias is None:
                raise ProtocolError("PUBLISH with an empty topic and no topic alias")
        elif not topic:
            raise MalformedPacket("PUBLISH with an empty topic")
        return Publish(topic, buf[pos:end], qos, bool(flags & 0x01), bool(flags & 0x08), packet_id, props)


def _refuse(error: CodecError) -> Handler:
    def refuse(buf: bytes, pos: int, end: int, level: int) -> Packet:
        raise type(error)(error.message)

    return refuse


def _checked(parse: Parser, name: str, buf: bytes, pos: int, end: int, level: int) -> Packet:
    packet, stop = parse(buf, pos, end, level)
    if stop != end:
        raise MalformedPacket(f"{name} has {end - stop} bytes past its content")
    return packet
