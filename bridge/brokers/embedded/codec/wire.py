"""The MQTT data representations (OASIS 3.1.1 section 1.5, 5.0 section 1.5): readers that check
every length against the end of the packet, and writers.

Readers take `(buf, pos, end)` and return `(value, new_pos)`; they never read past `end`, the
end the fixed header declared, so a field that claims more bytes than the packet holds is a
malformed packet rather than a read into the next packet (the desynchronisation amqtt showed:
docs/brokers.md#the-broker-core-what-comes-from-where).

Text: strict UTF-8 (no surrogates, no overlong forms), no U+0000 (a MUST in both versions), no
Unicode non-characters (which both versions allow a receiver to refuse). Control characters
U+0001-U+001F and U+007F-U+009F are accepted although a receiver may refuse them too (Mosquitto
does): a client id or topic holding a newline is stored as data, byte for byte (docs/architecture.md#bad-input, the
conformance suite's hostile input), which is the bridge's promise.
"""

from __future__ import annotations

import re

from bridge.brokers.embedded.codec.errors import MalformedPacket

_NON_CHARACTERS = "".join(f"{chr(plane << 16 | 0xFFFE)}{chr(plane << 16 | 0xFFFF)}" for plane in range(17))
_BAD_TEXT = re.compile(f"[\x00\ufdd0-\ufdef{_NON_CHARACTERS}]")
MAX_VARINT = 268_435_455


def text(raw: bytes) -> str:
    """`raw` as text, or MalformedPacket when MQTT does not allow it."""
    if raw.isascii():
        if b"\x00" in raw:
            raise MalformedPacket(f"string holds U+0000: {raw[:40]!r}")
        return raw.decode("ascii")
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise MalformedPacket(f"string is not valid UTF-8 ({error.reason} at byte {error.start})") from None
    found = _BAD_TEXT.search(decoded)
    if found is not None:
        raise MalformedPacket(f"string holds U+{ord(found.group()):04X}, which MQTT does not allow")
    return decoded


def read_u16(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise MalformedPacket("packet ends inside a two-byte integer")
    return buf[pos] << 8 | buf[pos + 1], pos + 2


def read_u32(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos + 4 > end:
        raise MalformedPacket("packet ends inside a four-byte integer")
    return int.from_bytes(buf[pos : pos + 4], "big"), pos + 4


def read_byte(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise MalformedPacket("packet ends before a one-byte field")
    return buf[pos], pos + 1


def read_binary(buf: bytes, pos: int, end: int) -> tuple[bytes, int]:
    if pos + 2 > end:
        raise MalformedPacket("packet ends inside a length prefix")
    stop = pos + 2 + (buf[pos] << 8 | buf[pos + 1])
    if stop > end:
        raise MalformedPacket(f"a field declares {stop - pos - 2} bytes but the packet holds {end - pos - 2}")
    return buf[pos + 2 : stop], stop


def read_string(buf: bytes, pos: int, end: int) -> tuple[str, int]:
    raw, pos = read_binary(buf, pos, end)
    return text(raw), pos


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A Variable Byte Integer: at most 4 bytes, in its shortest form."""
    value = shift = 0
    for index in range(4):
        if pos + index >= end:
            raise MalformedPacket("packet ends inside a variable byte integer")
        byte = buf[pos + index]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if byte == 0 and index:
                raise MalformedPacket("variable byte integer is not in its shortest form")
            return value, pos + index + 1
        shift += 7
    raise MalformedPacket("variable byte integer is longer than 4 bytes")


def varint(value: int) -> bytes:
    if value < 128:
        return bytes((value,))
    if value > MAX_VARINT:
        raise ValueError(f"{value} does not fit a variable byte integer")
    out = bytearray()
    while True:
        value, byte = divmod(value, 128)
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def binary(value: bytes) -> bytes:
    if len(value) > 0xFFFF:
        raise ValueError(f"a field of {len(value)} bytes is longer than 65535")
    return len(value).to_bytes(2, "big") + value


def string(value: str) -> bytes:
    return binary(value.encode("utf-8"))
