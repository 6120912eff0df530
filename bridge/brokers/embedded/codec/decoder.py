"""An incremental MQTT decoder for one connection's byte stream.

Feed it the chunks `asyncio.Protocol.data_received` gets; it returns the complete packets and
keeps at most one partial packet, or, when the caller asks for at most `limit` packets (a
connection's budget for one loop turn), the bytes past them, for a later `feed(b"", limit)`.
Every check is done before a packet is returned, so a packet that breaks a rule is never
half-handled: the decoder raises a `CodecError` naming the MQTT 5.0 reason code to disconnect
with, and is unusable afterwards (the connection must be closed).

Framing rules enforced (OASIS 3.1.1 section 2 and 5.0 section 2):
- remaining length at most 4 bytes and in its shortest form;
- `max_packet_size` (the whole packet, header included) checked as soon as the fixed header is
  read, before any of the body is buffered;
- the content must fill the declared length exactly: a field that runs past it, or bytes left
  after the last field, make the packet malformed;
- reserved flag bits of the fixed header, per packet type; PUBLISH QoS 3 and DUP on QoS 0;
- what costs per item inside a packet (codec/bounds.py: user properties, topic levels, topic
  filters per SUBSCRIBE / UNSUBSCRIBE), each checked as the item is read, so a packet over a
  bound is refused at the item past it, not after the whole packet was decoded.

The protocol level is learnt from CONNECT (server side: the first packet must be CONNECT and a
second one is a protocol error), or given up front (client side, or a test).
"""

from __future__ import annotations

from typing import Literal

from bridge.brokers.embedded.codec.bodies import connect_level
from bridge.brokers.embedded.codec.bounds import Bounds
from bridge.brokers.embedded.codec.errors import CodecError, MalformedPacket, PacketTooLarge, ProtocolError
from bridge.brokers.embedded.codec.handlers import handlers
from bridge.brokers.embedded.codec.packets import Connect, Packet

DEFAULT_MAX_PACKET_SIZE = 268_435_460
"""The largest packet MQTT can frame: 1 + 4 length bytes + 268,435,455."""


class Decoder:
    """Decodes one direction of one connection. `role` is the side doing the decoding: a server
    refuses packets only a server sends (CONNACK, SUBACK, ...) and a client's PUBLISH carrying a
    subscription identifier; a client refuses the reverse."""

    __slots__ = (
        "_bounds",
        "_failed",
        "_handlers",
        "_held",
        "_held_at",
        "_level",
        "_partial",
        "_server",
        "_wanted",
        "max_packet_size",
    )

    def __init__(
        self,
        max_packet_size: int = DEFAULT_MAX_PACKET_SIZE,
        level: int = 0,
        role: Literal["server", "client"] = "server",
        max_user_properties: int = 0,
        bounds: Bounds | None = None,
    ) -> None:
        self.max_packet_size = max_packet_size
        # `max_user_properties` alone: the one bound a client-side decoder or a test may want
        self._bounds = bounds if bounds is not None else Bounds(user_properties=max_user_properties)
        self._server = role == "server"
        # The start of a packet not whole yet: a bytearray while there is one, else the shared b""
        # (an empty bytearray per idle connection is 56 bytes, docs/benchmarks.md#memory-per-idle-connection).
        self._partial: bytes | bytearray = b""
        self._wanted = 0
        self._held = b""  # bytes past the packets a limited feed returned, not yet decoded...
        self._held_at = 0  # ...from this offset: a limited feed moves on without copying
        self._failed = False
        self.level = level

    @property
    def level(self) -> int:
        """The protocol level (3, 4 or 5); 0 until CONNECT is decoded."""
        return self._level

    @level.setter
    def level(self, level: int) -> None:
        self._level = level
        self._handlers = handlers(level, self._server)

    @property
    def buffered(self) -> int:
        """Bytes held: the one partial packet, or what a limited feed left undecoded."""
        return len(self._partial) + len(self._held) - self._held_at

    @property
    def held(self) -> bool:
        """A limited feed stopped with bytes left to decode: `feed(b"", limit)` goes on."""
        return bool(self._held)

    def keep(self, data: bytes) -> None:
        """Hold `data` undecoded, after what is held already, for the next `feed` (a connection
        past its turn's budget that is handed more bytes: the frames of one WebSocket read)."""
        if self._held:
            self._held, self._held_at = self._held[self._held_at :] + data, 0
        elif data:
            self._held, self._held_at = bytes(self._partial) + data, 0
            self._partial, self._wanted = b"", 0

    def feed(self, data: bytes, limit: int = 0) -> list[Packet]:
        """The packets `data` completes, in order; at most `limit` of them (0: all), the bytes
        past them held for the next call. Raises CodecError on the first bad packet, with the
        valid packets before it in `error.packets`."""
        if self._failed:
            raise ProtocolError("the stream already broke the protocol")
        start = 0
        if self._held:  # whole packets, maybe a partial one, from `_held_at`
            buf, start = self._held, self._held_at
            if data:
                buf, start = buf[start:] + data, 0
            self._held, self._held_at = b"", 0
        elif self._partial:
            self._partial += data
            if len(self._partial) < self._wanted:
                return []
            buf = bytes(self._partial)
            self._partial = b""
        else:
            buf = bytes(data)
        packets: list[Packet] = []
        pos, size, wanted = start, len(buf), 0
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
                packet = self._handlers[buf[pos]](buf, body, end, self._level, self._bounds)
                packets.append(packet)
                if type(packet) is Connect:
                    self.level = packet.protocol_level
                pos = end
                if len(packets) == limit and pos < size:
                    self._held, self._held_at = buf, pos
                    return packets
        except CodecError as error:
            self._failed = True
            error.packets = packets
            if not self._level and self._server:  # the first packet, a refused CONNECT
                error.level = connect_level(buf, pos, size)
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
