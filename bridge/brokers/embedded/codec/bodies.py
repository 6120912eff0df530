"""Decoding the variable header and payload of every packet type but PUBLISH (which the decoder
reads inline, being the hot path). Each parser gets the packet's bytes as `buf[pos:end]`, the
protocol level, and returns the packet with the position it stopped at; the decoder refuses a
packet whose parser stopped before `end` (content shorter than the declared length)."""

from __future__ import annotations

from collections.abc import Callable

from bridge.brokers.embedded.codec import properties, reasons, wire
from bridge.brokers.embedded.codec.bounds import Bounds
from bridge.brokers.embedded.codec.errors import (
    MalformedPacket,
    ProtocolError,
    TooManyEntries,
    UnsupportedProtocolVersion,
)
from bridge.brokers.embedded.codec.filters import subscription_filter_error, topic_wildcard_error
from bridge.brokers.embedded.codec.kinds import WILL, PacketType
from bridge.brokers.embedded.codec.packets import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)
from bridge.brokers.embedded.codec.properties import EMPTY, Properties

Parser = Callable[[bytes, int, int, int, Bounds], tuple[Packet, int]]
PROTOCOLS = {b"MQTT": (MQTT_3_1_1, MQTT_5), b"MQIsdp": (MQTT_3_1,)}


def packet_id(buf: bytes, pos: int, end: int, kind: PacketType) -> tuple[int, int]:
    value, pos = wire.read_u16(buf, pos, end)
    if value == 0:
        raise ProtocolError(f"{kind.name} with packet identifier 0")
    return value, pos


def _props(buf: bytes, pos: int, end: int, level: int, kind: int, bounds: Bounds) -> tuple[Properties, int]:
    return properties.decode(buf, pos, end, kind, bounds.user_properties) if level == MQTT_5 else (EMPTY, pos)


def connect_level(buf: bytes, pos: int, size: int) -> int:
    """The protocol level of the CONNECT at `pos` (its fixed header included), from what `buf`
    holds up to `size`; 0 if it is not a CONNECT or names no protocol level this codec speaks.
    Read only when a CONNECT is refused: a 5.0 client then gets a CONNACK it can decode."""
    if pos >= size or buf[pos] != PacketType.CONNECT << 4:
        return 0
    body = pos + 1
    for _ in range(4):  # past the remaining length
        if body >= size:
            return 0
        body += 1
        if not buf[body - 1] & 0x80:
            break
    else:
        return 0
    try:
        name, body = wire.read_binary(buf, body, size)
        level, _ = wire.read_byte(buf, body, size)
    except MalformedPacket:
        return 0
    return level if level in PROTOCOLS.get(name, ()) else 0


def connect(buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> tuple[Packet, int]:
    name, pos = wire.read_binary(buf, pos, end)
    level, pos = wire.read_byte(buf, pos, end)
    if name not in PROTOCOLS:
        raise ProtocolError(f"CONNECT for protocol {name[:20]!r}, not MQTT")
    if level not in PROTOCOLS[name]:
        raise UnsupportedProtocolVersion(f"CONNECT for {name.decode()} protocol level {level}")
    flags, pos = wire.read_byte(buf, pos, end)
    if flags & 0x01:
        raise MalformedPacket("CONNECT with the reserved flag set")
    will_flag, will_qos, will_retain = flags & 0x04, flags >> 3 & 3, bool(flags & 0x20)
    if will_flag and will_qos == 3:
        raise MalformedPacket("CONNECT with will QoS 3")
    if not will_flag and (will_qos or will_retain):
        raise MalformedPacket("CONNECT with will QoS or will retain but no will")
    if level < MQTT_5 and flags & 0x40 and not flags & 0x80:
        raise MalformedPacket("CONNECT with a password but no user name")
    keepalive, pos = wire.read_u16(buf, pos, end)
    props, pos = _props(buf, pos, end, level, PacketType.CONNECT, bounds)
    if props.authentication_data is not None and props.authentication_method is None:
        raise ProtocolError("CONNECT with authentication data but no authentication method")
    client_id, pos = wire.read_string(buf, pos, end)
    will = None
    if will_flag:
        will_props, pos = _props(buf, pos, end, level, WILL, bounds)
        # A will topic over the levels is refused by the broker with a CONNACK (return code 5 /
        # 0x90), which a 3.1.1 client can read: not here, where it could only be disconnected.
        topic, pos = wire.read_string(buf, pos, end)
        problem = topic_wildcard_error(topic) if topic else "will topic is empty"
        if problem:
            raise MalformedPacket(problem)
        payload, pos = wire.read_binary(buf, pos, end)
        will = Will(topic, payload, will_qos, will_retain, will_props)
    username = password = None
    if flags & 0x80:
        username, pos = wire.read_string(buf, pos, end)
    if flags & 0x40:
        password, pos = wire.read_binary(buf, pos, end)
    return Connect(client_id, level, bool(flags & 0x02), keepalive, username, password, will, props), pos


def connack(buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> tuple[Packet, int]:
    flags, pos = wire.read_byte(buf, pos, end)
    if flags & 0xFE:
        raise MalformedPacket("CONNACK with reserved acknowledge flags set")
    code, pos = wire.read_byte(buf, pos, end)
    allowed = reasons.CONNACK_REASONS if level == MQTT_5 else range(6)
    if code not in allowed:
        raise ProtocolError(f"CONNACK with reason code 0x{code:02X}")
    if flags and code:
        raise ProtocolError("CONNACK with session present and a refusal")
    props, pos = _props(buf, pos, end, level, PacketType.CONNACK, bounds)
    return Connack(bool(flags), code, props), pos


def _ack(cls: type[Puback | Pubrec | Pubrel | Pubcomp], allowed: frozenset[int]) -> Parser:
    def parse(buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> tuple[Packet, int]:
        if end - pos == 2 and (buf[pos] or buf[pos + 1]):  # the common short form, read inline
            return cls(buf[pos] << 8 | buf[pos + 1]), end
        ident, pos = packet_id(buf, pos, end, cls.TYPE)
        if level < MQTT_5 or pos == end:
            return cls(ident), pos
        code, pos = wire.read_byte(buf, pos, end)
        if code not in allowed:
            raise ProtocolError(f"{cls.TYPE.name} with reason code 0x{code:02X}")
        props = EMPTY
        if pos < end:
            props, pos = properties.decode(buf, pos, end, cls.TYPE, bounds.user_properties)
        return cls(ident, code, props), pos

    return parse


def _options(options: int, level: int, topic_filter: str) -> Subscription:
    qos = options & 3
    if level < MQTT_5:
        if options & 0xFC or qos == 3:
            raise MalformedPacket(f"SUBSCRIBE options 0x{options:02X} for {topic_filter!r}: reserved bits or QoS 3")
        return Subscription(topic_filter, qos)
    if options & 0xC0:
        raise MalformedPacket(f"SUBSCRIBE options 0x{options:02X} for {topic_filter!r} set reserved bits")
    retain_handling = options >> 4 & 3
    if qos == 3 or retain_handling == 3:
        raise ProtocolError(f"SUBSCRIBE options 0x{options:02X} for {topic_filter!r}: QoS or retain handling 3")
    no_local = bool(options & 0x04)
    if no_local and topic_filter.startswith("$share/"):
        raise ProtocolError(f"SUBSCRIBE with no local on shared subscription {topic_filter!r}")
    return Subscription(topic_filter, qos, no_local, bool(options & 0x08), retain_handling)


def _filter(buf: bytes, pos: int, end: int, bounds: Bounds) -> tuple[str, int]:
    topic_filter, pos = wire.read_string(buf, pos, end)
    # Over the levels even with a `$share/<group>/` prefix taken off: not parsed into its levels,
    # the broker refuses it for them (SUBACK 0x80 / 0x8F).
    if bounds.topic_levels and topic_filter.count("/") >= bounds.topic_levels + 2:
        return topic_filter, pos
    problem = subscription_filter_error(topic_filter)
    if problem:
        raise MalformedPacket(problem)
    return topic_filter, pos


def _entry_past(bounds: Bounds, count: int, kind: PacketType) -> None:
    if bounds.entries and count >= bounds.entries:
        raise TooManyEntries(f"{kind.name} with more than {bounds.entries} topic filters")


def subscribe(buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> tuple[Packet, int]:
    ident, pos = packet_id(buf, pos, end, PacketType.SUBSCRIBE)
    props, pos = _props(buf, pos, end, level, PacketType.SUBSCRIBE, bounds)
    subscriptions: list[Subscription] = []
    while pos < end:
        _entry_past(bounds, len(subscriptions), PacketType.SUBSCRIBE)
        topic_filter, pos = _filter(buf, pos, end, bounds)
        options, pos = wire.read_byte(buf, pos, end)
        subscriptions.append(_options(options, level, topic_filter))
    if not subscriptions:
        raise ProtocolError("SUBSCRIBE without a topic filter")
    return Subscribe(ident, subscriptions, props), pos


def unsubscribe(buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> tuple[Packet, int]:
    ident, pos = packet_id(buf, pos, end, PacketType.UNSUBSCRIBE)
    props, pos = _props(buf, pos, end, level, PacketType.UNSUBSCRIBE, bounds)
    filters: list[str] = []
    while pos < end:
        _entry_past(bounds, len(filters), PacketType.UNSUBSCRIBE)
        topic_filter, pos = _filter(buf, pos, end, bounds)
        filters.append(topic_filter)
    if not filters:
        raise ProtocolError("UNSUBSCRIBE without a topic filter")
    return Unsubscribe(ident, filters, props), pos


def _codes(buf: bytes, pos: int, end: int, kind: PacketType, allowed: frozenset[int]) -> list[int]:
    codes = list(buf[pos:end])
    if not codes:
        raise ProtocolError(f"{kind.name} without a reason code")
    for code in codes:
        if code not in allowed:
            raise ProtocolError(f"{kind.name} with reason code 0x{code:02X}")
    return codes


def suback(buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> tuple[Packet, int]:
    ident, pos = packet_id(buf, pos, end, PacketType.SUBACK)
    props, pos = _props(buf, pos, end, level, PacketType.SUBACK, bounds)
    allowed = reasons.SUBACK_REASONS if level == MQTT_5 else reasons.SUBACK_RETURN_CODES_311
    return Suback(ident, _codes(buf, pos, end, PacketType.SUBACK, allowed), props), end


def unsuback(buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> tuple[Packet, int]:
    ident, pos = packet_id(buf, pos, end, PacketType.UNSUBACK)
    if level < MQTT_5:
        return Unsuback(ident), pos
    props, pos = properties.decode(buf, pos, end, PacketType.UNSUBACK, bounds.user_properties)
    return Unsuback(ident, _codes(buf, pos, end, PacketType.UNSUBACK, reasons.UNSUBACK_REASONS), props), end


def _reason_only(cls: type[Disconnect | Auth], allowed: frozenset[int]) -> Parser:
    """DISCONNECT and AUTH: in 5.0 a reason code and properties, both omissible."""

    def parse(buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> tuple[Packet, int]:
        if level < MQTT_5 or pos == end:
            return cls(), pos
        code, pos = wire.read_byte(buf, pos, end)
        if code not in allowed:
            raise ProtocolError(f"{cls.TYPE.name} with reason code 0x{code:02X}")
        props = EMPTY
        if pos < end:
            props, pos = properties.decode(buf, pos, end, cls.TYPE, bounds.user_properties)
        return cls(code, props), pos

    return parse


def _empty(cls: type[Pingreq | Pingresp]) -> Parser:
    def parse(buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> tuple[Packet, int]:
        return cls(), pos

    return parse


PARSERS: dict[int, Parser] = {
    PacketType.CONNECT: connect,
    PacketType.CONNACK: connack,
    PacketType.PUBACK: _ack(Puback, reasons.PUBACK_REASONS),
    PacketType.PUBREC: _ack(Pubrec, reasons.PUBACK_REASONS),
    PacketType.PUBREL: _ack(Pubrel, reasons.PUBREL_REASONS),
    PacketType.PUBCOMP: _ack(Pubcomp, reasons.PUBREL_REASONS),
    PacketType.SUBSCRIBE: subscribe,
    PacketType.SUBACK: suback,
    PacketType.UNSUBSCRIBE: unsubscribe,
    PacketType.UNSUBACK: unsuback,
    PacketType.PINGREQ: _empty(Pingreq),
    PacketType.PINGRESP: _empty(Pingresp),
    PacketType.DISCONNECT: _reason_only(Disconnect, reasons.DISCONNECT_REASONS),
    PacketType.AUTH: _reason_only(Auth, reasons.AUTH_REASONS),
}
