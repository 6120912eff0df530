"""Which handler decodes a packet, by its first byte: one table of 256 handlers per protocol level
and side, built once and shared by every connection, so a packet's type, its header flags and
whether this side may receive it cost one list index.

PUBLISH is decoded here, inline, being the hot path; the other bodies are in `bodies`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from bridge.brokers.embedded.codec import properties, wire
from bridge.brokers.embedded.codec.bodies import PARSERS, Parser
from bridge.brokers.embedded.codec.bounds import Bounds
from bridge.brokers.embedded.codec.errors import CodecError, MalformedPacket, ProtocolError, TooManyTopicLevels
from bridge.brokers.embedded.codec.kinds import PacketType
from bridge.brokers.embedded.codec.packets import MQTT_5, Packet, Publish
from bridge.brokers.embedded.codec.properties import EMPTY

P = PacketType
Handler = Callable[[bytes, int, int, int, Bounds], Packet]
_FLAGS: dict[int, int] = {kind: 0x02 if kind in (P.PUBREL, P.SUBSCRIBE, P.UNSUBSCRIBE) else 0 for kind in P}
_RECEIVED_BY = {
    True: frozenset(P) - {P.CONNACK, P.SUBACK, P.UNSUBACK, P.PINGRESP},
    False: frozenset(P) - {P.CONNECT, P.SUBSCRIBE, P.UNSUBSCRIBE, P.PINGREQ},
}
_BAD_ASCII_TOPIC = re.compile(rb"[\x00+#]")


@functools.cache
def handlers(level: int, server: bool) -> tuple[Handler, ...]:
    """The handler for each first byte at protocol `level` (0: before CONNECT) on one side."""
    return tuple(_handler(first >> 4, first & 0x0F, level, server) for first in range(256))


def _handler(kind: int, flags: int, level: int, server: bool) -> Handler:
    if kind == 0 or (kind == P.AUTH and level and level < MQTT_5):
        return _refuse(MalformedPacket(f"packet type {kind} is reserved"))
    name = P(kind).name
    if not level and server and kind != P.CONNECT:
        return _refuse(ProtocolError(f"first packet is {name}, not CONNECT"))
    if kind not in _RECEIVED_BY[server]:
        return _refuse(ProtocolError(f"{name} is never sent to a {'server' if server else 'client'}"))
    if kind == P.CONNECT and level:
        return _refuse(ProtocolError("second CONNECT on one connection"))
    if kind == P.PUBLISH:
        if not level:
            return _refuse(ProtocolError("PUBLISH before the protocol level is known"))
        return functools.partial(publish, flags, server)
    if flags != _FLAGS[kind]:
        return _refuse(MalformedPacket(f"{name} with reserved header flags 0x{flags:X}"))
    return functools.partial(_checked, PARSERS[kind], name)


def _refuse(error: CodecError) -> Handler:
    def refuse(buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> Packet:
        raise type(error)(error.message)

    return refuse


def _checked(parse: Parser, name: str, buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> Packet:
    packet, stop = parse(buf, pos, end, level, bounds)
    if stop != end:
        raise MalformedPacket(f"{name} has {end - stop} bytes past its content")
    return packet


def publish(flags: int, server: bool, buf: bytes, pos: int, end: int, level: int, bounds: Bounds) -> Publish:
    """PUBLISH, read inline: the hot path. Its topic's levels are counted on the bytes, before
    the topic is decoded; its user properties as they are read (codec/bounds.py)."""
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
    if bounds.topic_levels and raw.count(b"/") >= bounds.topic_levels:
        raise TooManyTopicLevels(f"topic with more than {bounds.topic_levels} levels")
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
            props, pos = properties.decode(buf, pos, end, P.PUBLISH, bounds.user_properties)
        if server and props.subscription_identifier:
            raise ProtocolError("PUBLISH from a client with a subscription identifier")
        if not topic and props.topic_alias is None:
            raise ProtocolError("PUBLISH with an empty topic and no topic alias")
    elif not topic:
        raise MalformedPacket("PUBLISH with an empty topic")
    return Publish(topic, buf[pos:end], qos, bool(flags & 0x01), bool(flags & 0x08), packet_id, props)
