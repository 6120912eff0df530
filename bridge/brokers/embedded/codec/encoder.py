"""Encoding every packet for a protocol level (3 and 4: MQTT 3.1/3.1.1, 5: MQTT 5.0).

`encode(packet, level)` handles every type; `encode_publish` and `encode_puback` are the hot path
(one per message in each direction) and build their bytes with as few Python steps as we could
measure (bench/codec_bench.py). In 5.0 an acknowledgement with reason code 0 and no properties
is sent in its short form, as the specification allows.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct
from typing import Any

from bridge.brokers.embedded.codec import packets as p
from bridge.brokers.embedded.codec import properties
from bridge.brokers.embedded.codec.kinds import PacketType
from bridge.brokers.embedded.codec.packets import MQTT_3_1, MQTT_5
from bridge.brokers.embedded.codec.properties import EMPTY
from bridge.brokers.embedded.codec.wire import MAX_VARINT, binary, string, varint

_ACK = Struct(">BBH")
_U16 = Struct(">H")


def frame(first: int, body: bytes) -> bytes:
    """Fixed header + body."""
    length = len(body)
    if length < 128:
        return bytes((first, length)) + body
    if length > MAX_VARINT:
        raise ValueError(f"packet body of {length} bytes is over MQTT's limit")
    return bytes((first,)) + varint(length) + body


def encode_publish(packet: p.Publish, level: int) -> bytes:
    return publish_bytes(
        packet.topic, packet.payload, packet.qos, packet.retain, packet.dup, packet.packet_id, packet.properties, level
    )


def publish_bytes(
    topic_name: str,
    payload: bytes,
    qos: int,
    retain: bool,
    dup: bool,
    packet_id: int,
    props: properties.Properties,
    level: int,
) -> bytes:
    """A PUBLISH from its fields: the broker's deliveries, without a `Publish` object each (its
    class is interpreted, this module compiled: building one cost more than encoding it)."""
    topic = topic_name.encode()
    if len(topic) > 0xFFFF:
        raise ValueError(f"a topic of {len(topic)} bytes is longer than 65535")
    first = 0x30 | qos << 1 | retain | dup << 3
    head = _U16.pack(len(topic)) + topic
    if qos:
        head += _U16.pack(packet_id)
    if level == MQTT_5:
        head += b"\x00" if props is EMPTY else properties.encode(props)
    length = len(head) + len(payload)
    if length < 128:
        return bytes((first, length)) + head + payload
    if length > MAX_VARINT:
        raise ValueError(f"PUBLISH of {length} bytes is over MQTT's limit")
    return b"".join((bytes((first,)), varint(length), head, payload))


def _ack(packet: p.Ack, level: int) -> bytes:
    first = packet.TYPE << 4 | (0x02 if packet.TYPE == PacketType.PUBREL else 0)
    if level < MQTT_5 or (not packet.reason_code and packet.properties is EMPTY):
        return _ACK.pack(first, 2, packet.packet_id)
    body = _U16.pack(packet.packet_id) + bytes((packet.reason_code,))
    if packet.properties is not EMPTY:
        body += properties.encode(packet.properties)
    return frame(first, body)


def encode_puback(packet: p.Puback, level: int) -> bytes:
    if not packet.reason_code and packet.properties is EMPTY:
        return _ACK.pack(0x40, 2, packet.packet_id)
    return _ack(packet, level)


def _props(packet: Any, level: int) -> bytes:
    return properties.encode(packet.properties) if level == MQTT_5 else b""


def _connect(packet: p.Connect, level: int) -> bytes:
    will, name = packet.will, b"MQIsdp" if packet.protocol_level == MQTT_3_1 else b"MQTT"
    flags = packet.clean_start << 1 | (packet.username is not None) << 7 | (packet.password is not None) << 6
    if will is not None:
        flags |= 0x04 | will.qos << 3 | will.retain << 5
    parts = [binary(name), bytes((packet.protocol_level, flags)), _U16.pack(packet.keepalive)]
    parts += [_props(packet, level), string(packet.client_id)]
    if will is not None:
        will_props = properties.encode(will.properties) if level == MQTT_5 else b""
        parts += [will_props, string(will.topic), binary(will.payload)]
    if packet.username is not None:
        parts.append(string(packet.username))
    if packet.password is not None:
        parts.append(binary(packet.password))
    return frame(0x10, b"".join(parts))


def _connack(packet: p.Connack, level: int) -> bytes:
    return frame(0x20, bytes((packet.session_present, packet.reason_code)) + _props(packet, level))


def _subscribe(packet: p.Subscribe, level: int) -> bytes:
    parts = [_U16.pack(packet.packet_id), _props(packet, level)]
    for sub in packet.subscriptions:
        options = sub.qos
        if level == MQTT_5:
            options |= sub.no_local << 2 | sub.retain_as_published << 3 | sub.retain_handling << 4
        parts += [string(sub.topic_filter), bytes((options,))]
    return frame(0x82, b"".join(parts))


def _suback(packet: p.Suback, level: int) -> bytes:
    return frame(0x90, _U16.pack(packet.packet_id) + _props(packet, level) + bytes(packet.reason_codes))


def _unsubscribe(packet: p.Unsubscribe, level: int) -> bytes:
    filters = b"".join(string(topic_filter) for topic_filter in packet.topic_filters)
    return frame(0xA2, _U16.pack(packet.packet_id) + _props(packet, level) + filters)


def _unsuback(packet: p.Unsuback, level: int) -> bytes:
    if level < MQTT_5:
        return _ACK.pack(0xB0, 2, packet.packet_id)
    return frame(0xB0, _U16.pack(packet.packet_id) + _props(packet, level) + bytes(packet.reason_codes))


def _reason_only(packet: p.Disconnect | p.Auth, level: int) -> bytes:
    first = packet.TYPE << 4
    if level < MQTT_5 or (not packet.reason_code and packet.properties is EMPTY):
        return bytes((first, 0))
    return frame(first, bytes((packet.reason_code,)) + properties.encode(packet.properties))


_ENCODERS: dict[type[Any], Callable[[Any, int], bytes]] = {
    p.Connect: _connect,
    p.Connack: _connack,
    p.Publish: encode_publish,
    p.Puback: _ack,
    p.Pubrec: _ack,
    p.Pubrel: _ack,
    p.Pubcomp: _ack,
    p.Subscribe: _subscribe,
    p.Suback: _suback,
    p.Unsubscribe: _unsubscribe,
    p.Unsuback: _unsuback,
    p.Pingreq: lambda packet, level: b"\xc0\x00",
    p.Pingresp: lambda packet, level: b"\xd0\x00",
    p.Disconnect: _reason_only,
    p.Auth: _reason_only,
}


def encode(packet: p.Packet, level: int) -> bytes:
    """`packet` as bytes for a connection at protocol `level`. Raises ValueError when a value
    cannot be framed (a string over 65535 bytes, a packet over 256 MB, AUTH below 5.0)."""
    if isinstance(packet, p.Auth) and level < MQTT_5:
        raise ValueError("AUTH exists only in MQTT 5.0")
    return _ENCODERS[type(packet)](packet, level)
