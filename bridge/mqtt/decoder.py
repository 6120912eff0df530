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

import re
from typing import Literal

from bridge.mqtt import properties, wire
from bridge.mqtt.bodies import PARSERS
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
DEFAULT_MAX_PACKET_SIZE = 268_435_460
"""The largest packet MQTT can frame: 1 + 4 length bytes + 268,435,455."""


class Decoder:
    """Decodes one direction of one connection. `role` is the side doing the decoding: a server
    refuses packets only a server sends (CONNACK, SUBACK, ...) and a client's PUBLISH carrying a
    subscription identifier; a client refuses the reverse."""

    __slots__ = ("_failed", "_partial", "_received", "_server", "_wanted", "level", "max_packet_size")

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
                packets.append(self._packet(buf[pos], buf, body, end))
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

    def _packet(self, first: int, buf: bytes, pos: int, end: int) -> Packet:
        kind = first >> 4
        if kind == P.PUBLISH and self.level:
            return self._publish(first & 0x0F, buf, pos, end)
        if kind == 0 or (kind == P.AUTH and self.level and self.level < MQTT_5):
            raise MalformedPacket(f"packet type {kind} is reserved")
        if not self.level and self._server and kind != P.CONNECT:
            raise ProtocolError(f"first packet is {P(kind).name}, not CONNECT")
        if kind not in self._received:
            raise ProtocolError(f"{P(kind).name} is never sent to a {'server' if self._server else 'client'}")
        if kind == P.CONNECT and self.level:
            raise ProtocolError("second CONNECT on one connection")
        if kind == P.PUBLISH:
            raise ProtocolError("PUBLISH before the protocol level is known")
        if first & 0x0F != _FLAGS[kind]:
            raise MalformedPacket(f"{P(kind).name} with reserved header flags 0x{first & 0x0F:X}")
        packet, stop = PARSERS[kind](buf, pos, end, self.level)
        if stop != end:
            raise MalformedPacket(f"{P(kind).name} has {end - stop} bytes past its content")
        if isinstance(packet, Connect):
            self.level = packet.protocol_level
        return packet

    def _publish(self, flags: int, buf: bytes, pos: int, end: int) -> Publish:
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
        if self.level == MQTT_5:
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
