"""MQTT packets as bytes, written and read byte by byte from the specifications (3.1.1 section 3,
5.0 section 3), not by the project's codec: for what a well-behaved library refuses to send (paho
will not send a 3.1.1 CONNECT with an empty client id and a persistent session, and it answers
every PUBREC with a PUBREL) and for the broker suite, which must not test the codec with itself.
Only the few packets the tests need are here; `support.raw.RawClient` sends and reads them
(`send_bytes`, `recv_frame`)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBSCRIBE, SUBACK, DISCONNECT = (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    14,
)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value % 128, value // 128
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("!H", len(data)) + data


def packet(kind: int, flags: int, body: bytes) -> bytes:
    return bytes([kind << 4 | flags]) + _varint(len(body)) + body


def connect(clientid: str, *, version: int, clean: bool = True, keepalive: int = 60) -> bytes:
    """CONNECT, no will or credentials; 5.0 with an empty property list."""
    header = _string("MQTT") + bytes([version, 0x02 if clean else 0x00]) + struct.pack("!H", keepalive)
    properties = b"\x00" if version == 5 else b""
    return packet(CONNECT, 0, header + properties + _string(clientid))


def publish(topic: str, payload: bytes, *, qos: int, packet_id: int, version: int) -> bytes:
    body = _string(topic) + (struct.pack("!H", packet_id) if qos else b"")
    body += (b"\x00" if version == 5 else b"") + payload
    return packet(PUBLISH, qos << 1, body)


def subscribe(topic_filter: str, *, qos: int, packet_id: int, version: int) -> bytes:
    body = struct.pack("!H", packet_id) + (b"\x00" if version == 5 else b"") + _string(topic_filter) + bytes([qos])
    return packet(SUBSCRIBE, 0x02, body)


def ack(kind: int, packet_id: int) -> bytes:
    """PUBACK / PUBREC / PUBREL / PUBCOMP (PUBREL has the reserved flags 0b0010)."""
    return packet(kind, 0x02 if kind == PUBREL else 0, struct.pack("!H", packet_id))


@dataclass(frozen=True)
class Frame:
    kind: int
    flags: int
    body: bytes

    @property
    def reason(self) -> int:
        """CONNACK: its return code (3.1.1) / reason code (5.0); DISCONNECT: its reason code (0 if none)."""
        if self.kind == CONNACK:
            return self.body[1]
        return self.body[0] if self.body else 0

    @property
    def packet_id(self) -> int:
        """The packet id of an ack; for a PUBLISH see `publish_fields`."""
        return int(struct.unpack("!H", self.body[:2])[0])

    @property
    def dup(self) -> bool:
        return bool(self.flags & 0x08)

    def publish_fields(self, version: int) -> tuple[str, int, bytes]:
        """A PUBLISH's (topic, packet id, payload); packet id 0 for QoS 0."""
        (length,) = struct.unpack("!H", self.body[:2])
        topic, rest = self.body[2 : 2 + length].decode(), self.body[2 + length :]
        packet_id = 0
        if self.flags & 0x06:
            packet_id, rest = int(struct.unpack("!H", rest[:2])[0]), rest[2:]
        if version == 5:
            rest = rest[1 + rest[0] :]  # properties shorter than 128 bytes: a one-byte length
        return topic, packet_id, rest


def take_frame(buffer: bytearray) -> Frame | None:
    """Cut the first whole packet off `buffer`; None while it holds less than one."""
    if len(buffer) < 2:
        return None
    length, shift, at = 0, 0, 1
    while True:
        if at >= len(buffer):
            return None
        byte = buffer[at]
        length += (byte & 0x7F) << shift
        shift += 7
        at += 1
        if not byte & 0x80:
            break
    if len(buffer) < at + length:
        return None
    frame = Frame(buffer[0] >> 4, buffer[0] & 0x0F, bytes(buffer[at : at + length]))
    del buffer[: at + length]
    return frame
