"""MQTT 5.0 properties (section 2.2.2): every identifier with its data type, the packets that may
carry it and the values it may take; one frozen value type holding a packet's properties.

The table drives decoding, encoding and the checks, so a property is described once. A property
on a packet that does not allow it, or an unknown identifier, is a malformed packet (2.2.2.2); a
second copy of one that may not repeat, or a value outside its range, is a protocol error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum, IntEnum
from typing import Any

from bridge.brokers.embedded.codec import wire
from bridge.brokers.embedded.codec.errors import MalformedPacket, ProtocolError, TooManyUserProperties
from bridge.brokers.embedded.codec.kinds import WILL, PacketType, context_name

P = PacketType
CONNECT, CONNACK, PUBLISH, SUBSCRIBE = P.CONNECT, P.CONNACK, P.PUBLISH, P.SUBSCRIBE
SUBACK, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = (
    P.SUBACK,
    P.UNSUBACK,
    P.PINGREQ,
    P.PINGRESP,
    P.DISCONNECT,
    P.AUTH,
)


class PropertyId(IntEnum):
    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


class DataType(Enum):
    BYTE = "byte"
    TWO_BYTE_INTEGER = "two-byte integer"
    FOUR_BYTE_INTEGER = "four-byte integer"
    VARIABLE_BYTE_INTEGER = "variable byte integer"
    UTF8_STRING = "UTF-8 string"
    UTF8_STRING_PAIR = "UTF-8 string pair"
    BINARY_DATA = "binary data"


@dataclass(frozen=True, slots=True)
class PropertySpec:
    id: PropertyId
    type: DataType
    packets: frozenset[int]
    valid: tuple[int, int] | None = None
    """Inclusive range an integer value must lie in (a protocol error outside it)."""
    repeats_in: frozenset[int] = frozenset()

    @property
    def field(self) -> str:
        return self.id.name.lower()


_T = DataType
_ACKS = frozenset({P.PUBACK, P.PUBREC, P.PUBREL, P.PUBCOMP})
_MESSAGE = frozenset({PUBLISH, WILL})
_FLAG = (0, 1)
SPECS: dict[int, PropertySpec] = {
    s.id: s
    for s in (
        PropertySpec(PropertyId.PAYLOAD_FORMAT_INDICATOR, _T.BYTE, _MESSAGE, _FLAG),
        PropertySpec(PropertyId.MESSAGE_EXPIRY_INTERVAL, _T.FOUR_BYTE_INTEGER, _MESSAGE),
        PropertySpec(PropertyId.CONTENT_TYPE, _T.UTF8_STRING, _MESSAGE),
        PropertySpec(PropertyId.RESPONSE_TOPIC, _T.UTF8_STRING, _MESSAGE),
        PropertySpec(PropertyId.CORRELATION_DATA, _T.BINARY_DATA, _MESSAGE),
        PropertySpec(
            PropertyId.SUBSCRIPTION_IDENTIFIER,
            _T.VARIABLE_BYTE_INTEGER,
            frozenset({PUBLISH, SUBSCRIBE}),
            (1, wire.MAX_VARINT),
            frozenset({PUBLISH}),
        ),
        PropertySpec(
            PropertyId.SESSION_EXPIRY_INTERVAL, _T.FOUR_BYTE_INTEGER, frozenset({CONNECT, CONNACK, DISCONNECT})
        ),
        PropertySpec(PropertyId.ASSIGNED_CLIENT_IDENTIFIER, _T.UTF8_STRING, frozenset({CONNACK})),
        PropertySpec(PropertyId.SERVER_KEEP_ALIVE, _T.TWO_BYTE_INTEGER, frozenset({CONNACK})),
        PropertySpec(PropertyId.AUTHENTICATION_METHOD, _T.UTF8_STRING, frozenset({CONNECT, CONNACK, AUTH})),
        PropertySpec(PropertyId.AUTHENTICATION_DATA, _T.BINARY_DATA, frozenset({CONNECT, CONNACK, AUTH})),
        PropertySpec(PropertyId.REQUEST_PROBLEM_INFORMATION, _T.BYTE, frozenset({CONNECT}), _FLAG),
        PropertySpec(PropertyId.WILL_DELAY_INTERVAL, _T.FOUR_BYTE_INTEGER, frozenset({WILL})),
        PropertySpec(PropertyId.REQUEST_RESPONSE_INFORMATION, _T.BYTE, frozenset({CONNECT}), _FLAG),
        PropertySpec(PropertyId.RESPONSE_INFORMATION, _T.UTF8_STRING, frozenset({CONNACK})),
        PropertySpec(PropertyId.SERVER_REFERENCE, _T.UTF8_STRING, frozenset({CONNACK, DISCONNECT})),
        PropertySpec(
            PropertyId.REASON_STRING,
            _T.UTF8_STRING,
            _ACKS | {CONNACK, SUBACK, UNSUBACK, DISCONNECT, AUTH},
        ),
        PropertySpec(PropertyId.RECEIVE_MAXIMUM, _T.TWO_BYTE_INTEGER, frozenset({CONNECT, CONNACK}), (1, 0xFFFF)),
        PropertySpec(PropertyId.TOPIC_ALIAS_MAXIMUM, _T.TWO_BYTE_INTEGER, frozenset({CONNECT, CONNACK})),
        PropertySpec(PropertyId.TOPIC_ALIAS, _T.TWO_BYTE_INTEGER, frozenset({PUBLISH}), (1, 0xFFFF)),
        PropertySpec(PropertyId.MAXIMUM_QOS, _T.BYTE, frozenset({CONNACK}), _FLAG),
        PropertySpec(PropertyId.RETAIN_AVAILABLE, _T.BYTE, frozenset({CONNACK}), _FLAG),
        PropertySpec(
            PropertyId.USER_PROPERTY,
            _T.UTF8_STRING_PAIR,
            frozenset(range(CONNECT, WILL + 1)) - {PINGREQ, PINGRESP},
            repeats_in=frozenset(range(CONNECT, WILL + 1)),
        ),
        PropertySpec(
            PropertyId.MAXIMUM_PACKET_SIZE, _T.FOUR_BYTE_INTEGER, frozenset({CONNECT, CONNACK}), (1, 0xFFFFFFFF)
        ),
        PropertySpec(PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE, _T.BYTE, frozenset({CONNACK}), _FLAG),
        PropertySpec(PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE, _T.BYTE, frozenset({CONNACK}), _FLAG),
        PropertySpec(PropertyId.SHARED_SUBSCRIPTION_AVAILABLE, _T.BYTE, frozenset({CONNACK}), _FLAG),
    )
}


@dataclass(frozen=True, slots=True)
class Properties:
    """A packet's properties; None (or empty) where absent. Frozen, so `EMPTY` can be shared:
    change one with `dataclasses.replace`."""

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifier: tuple[int, ...] = ()
    """One in SUBSCRIBE; any number in PUBLISH from the server (one per matching subscription)."""
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_property: tuple[tuple[str, str], ...] = ()
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None


EMPTY = Properties()
_REPEATED = frozenset({"subscription_identifier", "user_property"})
assert [f.name for f in fields(Properties)] == [s.field for s in SPECS.values()], "one field per property, in order"


def _read_pair(buf: bytes, pos: int, end: int) -> tuple[tuple[str, str], int]:
    name, pos = wire.read_string(buf, pos, end)
    value, pos = wire.read_string(buf, pos, end)
    return (name, value), pos


def _write_pair(pair: tuple[str, str]) -> bytes:
    return wire.string(pair[0]) + wire.string(pair[1])


_READERS: dict[DataType, Callable[[bytes, int, int], tuple[Any, int]]] = {
    _T.BYTE: wire.read_byte,
    _T.TWO_BYTE_INTEGER: wire.read_u16,
    _T.FOUR_BYTE_INTEGER: wire.read_u32,
    _T.VARIABLE_BYTE_INTEGER: wire.read_varint,
    _T.UTF8_STRING: wire.read_string,
    _T.UTF8_STRING_PAIR: _read_pair,
    _T.BINARY_DATA: wire.read_binary,
}
_WRITERS: dict[DataType, Callable[[Any], bytes]] = {
    _T.BYTE: lambda value: bytes((value,)),
    _T.TWO_BYTE_INTEGER: lambda value: value.to_bytes(2, "big"),
    _T.FOUR_BYTE_INTEGER: lambda value: value.to_bytes(4, "big"),
    _T.VARIABLE_BYTE_INTEGER: wire.varint,
    _T.UTF8_STRING: wire.string,
    _T.UTF8_STRING_PAIR: _write_pair,
    _T.BINARY_DATA: wire.binary,
}


def decode(buf: bytes, pos: int, end: int, packet: int, max_user_properties: int = 0) -> tuple[Properties, int]:
    """The property block at `pos` (its length first) of a packet of type `packet` (or WILL).
    More than `max_user_properties` user properties (0: no limit) is refused at the one past
    it (TooManyUserProperties), before the rest of the block is read."""
    length, pos = wire.read_varint(buf, pos, end)
    if length == 0:
        return EMPTY, pos
    stop = pos + length
    if stop > end:
        raise MalformedPacket(f"properties declare {length} bytes but the packet holds {end - pos}")
    found: dict[str, Any] = {}
    repeated: dict[str, list[Any]] = {}  # frozen once at the end: appending stays linear
    while pos < stop:
        ident, pos = wire.read_varint(buf, pos, stop)
        spec = SPECS.get(ident)
        if spec is None:
            raise MalformedPacket(f"unknown property 0x{ident:02X}")
        if packet not in spec.packets:
            raise MalformedPacket(f"property {spec.field} is not allowed in {context_name(packet)}")
        value, pos = _READERS[spec.type](buf, pos, stop)
        name = spec.field
        if spec.valid is not None and not spec.valid[0] <= value <= spec.valid[1]:
            raise ProtocolError(f"property {name} = {value} is out of range {spec.valid[0]}..{spec.valid[1]}")
        if name in _REPEATED:
            values = repeated.setdefault(name, [])
            if values and packet not in spec.repeats_in:
                raise ProtocolError(f"property {name} appears twice in {context_name(packet)}")
            values.append(value)
            if max_user_properties and len(values) > max_user_properties and spec.id == PropertyId.USER_PROPERTY:
                raise TooManyUserProperties(f"more than {max_user_properties} user properties")
            continue
        if name in found:
            raise ProtocolError(f"property {name} appears twice in {context_name(packet)}")
        found[name] = value
    for name, values in repeated.items():
        found[name] = tuple(values)
    return Properties(**found), stop


def encode(properties: Properties) -> bytes:
    """The property block, its length first."""
    if properties is EMPTY:
        return b"\x00"
    out = bytearray()
    for ident, spec in SPECS.items():
        value = getattr(properties, spec.field)
        if value is None or value == ():
            continue
        write = _WRITERS[spec.type]
        for one in value if spec.field in _REPEATED else (value,):
            out.append(ident)
            out += write(one)
    return wire.varint(len(out)) + bytes(out)
