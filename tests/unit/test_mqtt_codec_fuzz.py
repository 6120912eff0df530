"""Property tests of the MQTT codec: arbitrary bytes in any chunking only ever raise the codec's
own error (never IndexError, UnicodeDecodeError, ...), the decoder holds no more than one partial
packet, and every packet hypothesis can build round-trips through encode and decode.

The decoder has no loop that can spin without consuming input (each pass either returns a packet
and moves past it, or stops for more bytes), so "never hangs" is checked as "every example ends";
there is no time limit in the pass/fail test.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.brokers.embedded.codec import (
    MQTT_3_1,
    MQTT_3_1_1,
    MQTT_5,
    Auth,
    CodecError,
    Connack,
    Connect,
    Decoder,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
    encode,
)
from bridge.brokers.embedded.codec import reasons as rc
from bridge.brokers.embedded.codec.kinds import WILL, PacketType
from bridge.brokers.embedded.codec.properties import SPECS, DataType
from bridge.brokers.embedded.codec.wire import MAX_VARINT

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
P = PacketType

# -- arbitrary bytes -------------------------------------------------------------------------

# Starting bytes that pass the fixed header often (valid first bytes, short lengths) so the
# examples reach the body parsers rather than stopping at the header.
_FIRST = st.sampled_from(
    [0x10, 0x20, 0x30, 0x32, 0x34, 0x3B, 0x40, 0x50, 0x62, 0x70, 0x82, 0x90, 0xA2, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0]
)
_PACKETISH = st.tuples(_FIRST, st.binary(max_size=40)).map(lambda fb: bytes((fb[0], len(fb[1]))) + fb[1])
_STREAM = st.lists(st.one_of(_PACKETISH, st.binary(max_size=20)), max_size=6).map(b"".join)
_CUTS = st.lists(st.integers(min_value=0, max_value=300), max_size=5)


@SETTINGS
@given(
    data=_STREAM,
    cuts=_CUTS,
    level=st.sampled_from([0, MQTT_3_1_1, MQTT_5]),
    role=st.sampled_from(["server", "client"]),
)
def test_random_bytes_raise_only_codec_errors_and_hold_at_most_one_packet(
    data: bytes, cuts: list[int], level: int, role: str
) -> None:
    decoder = Decoder(max_packet_size=200, level=level, role=role)  # type: ignore[arg-type]
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    error = None
    for start, stop in itertools.pairwise(bounds):
        try:
            decoder.feed(data[start:stop])
        except CodecError as refused:
            error = refused
            break
        # what is held is a strict prefix of one packet (under the size limit): alone, it completes nothing
        assert decoder.buffered < 200
        held = data[stop - decoder.buffered : stop]
        assert Decoder(level=decoder.level, role=role).feed(held) == []  # type: ignore[arg-type]
    if error is not None:
        assert 0x80 <= error.reason <= 0xA2
        assert error.message


@SETTINGS
@given(st.binary(max_size=64))
def test_random_bytes_after_a_valid_connect_raise_only_codec_errors(tail: bytes) -> None:
    for level in (MQTT_3_1_1, MQTT_5):
        try:
            packets = Decoder().feed(encode(Connect("c", level), level) + tail)
        except CodecError as error:
            packets = error.packets
        assert packets[0] == Connect("c", level)


# -- generated packets ---------------------------------------------------------------------

_TEXT_CHARS = st.characters(blacklist_categories=["Cs", "Cc", "Cn"])
text = st.text(_TEXT_CHARS, max_size=12)
topic = st.text(
    st.characters(blacklist_categories=["Cs", "Cc", "Cn"], blacklist_characters="+#"), min_size=1, max_size=20
)
_LEVEL = st.text(st.characters(blacklist_categories=["Cs", "Cc", "Cn"], blacklist_characters="+#/"), max_size=6)


@st.composite
def topic_filter(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.one_of(_LEVEL, st.just("+")), min_size=1, max_size=4))
    if draw(st.booleans()):
        levels.append("#")
    result = "/".join(levels) or "+"  # a filter is at least one character
    if draw(st.booleans()):
        group = draw(
            st.text(
                st.characters(blacklist_categories=["Cs", "Cc", "Cn"], blacklist_characters="+#/"),
                min_size=1,
                max_size=5,
            )
        )
        result = f"$share/{group}/{result}"
    return result


_SIMPLE: dict[DataType, st.SearchStrategy[Any]] = {
    DataType.BYTE: st.integers(0, 255),
    DataType.TWO_BYTE_INTEGER: st.integers(0, 0xFFFF),
    DataType.FOUR_BYTE_INTEGER: st.integers(0, 0xFFFFFFFF),
    DataType.VARIABLE_BYTE_INTEGER: st.integers(1, MAX_VARINT),
    DataType.UTF8_STRING: text,
    DataType.BINARY_DATA: st.binary(max_size=16),
}


def properties(context: int, level: int, from_server: bool = False) -> st.SearchStrategy[Properties]:
    if level != MQTT_5:
        return st.just(Properties())
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for spec in SPECS.values():
        if context not in spec.packets:
            continue
        if spec.field == "user_property":
            fields[spec.field] = st.lists(st.tuples(text, text), max_size=3).map(tuple)
        elif spec.field == "subscription_identifier":
            most = (3 if from_server else 0) if context == P.PUBLISH else 1
            fields[spec.field] = st.lists(st.integers(1, MAX_VARINT), max_size=most).map(tuple)
        else:
            value = _SIMPLE[spec.type] if spec.valid is None else st.integers(*spec.valid)
            fields[spec.field] = st.none() | value
    made = st.fixed_dictionaries(fields).map(lambda kw: Properties(**kw))
    return made.filter(lambda p: p.authentication_data is None or p.authentication_method is not None)


def reason(allowed: frozenset[int], level: int) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(allowed)) if level == MQTT_5 else st.just(0)


def ack(cls: Any, allowed: frozenset[int], level: int) -> st.SearchStrategy[Packet]:
    return st.builds(cls, st.integers(1, 0xFFFF), reason(allowed, level), properties(cls.TYPE, level))


@st.composite
def publish(draw: st.DrawFn, level: int, from_server: bool) -> Publish:
    qos = draw(st.integers(0, 2))
    return Publish(
        draw(topic),
        draw(st.binary(max_size=300)),
        qos,
        draw(st.booleans()),
        draw(st.booleans()) if qos else False,
        draw(st.integers(1, 0xFFFF)) if qos else 0,
        draw(properties(P.PUBLISH, level, from_server)),
    )


def subscription(level: int) -> st.SearchStrategy[Subscription]:
    if level != MQTT_5:
        return st.builds(Subscription, topic_filter(), st.integers(0, 2))
    made = st.builds(Subscription, topic_filter(), st.integers(0, 2), st.booleans(), st.booleans(), st.integers(0, 2))
    return made.filter(lambda s: not (s.no_local and s.topic_filter.startswith("$share/")))


def to_server(level: int) -> st.SearchStrategy[Packet]:
    ident = st.integers(1, 0xFFFF)
    return st.one_of(
        publish(level, from_server=False),
        ack(Puback, rc.PUBACK_REASONS, level),
        ack(Pubrec, rc.PUBACK_REASONS, level),
        ack(Pubrel, rc.PUBREL_REASONS, level),
        ack(Pubcomp, rc.PUBREL_REASONS, level),
        st.builds(
            Subscribe, ident, st.lists(subscription(level), min_size=1, max_size=4), properties(P.SUBSCRIBE, level)
        ),
        st.builds(
            Unsubscribe, ident, st.lists(topic_filter(), min_size=1, max_size=4), properties(P.UNSUBSCRIBE, level)
        ),
        st.just(Pingreq()),
        st.builds(Disconnect, reason(rc.DISCONNECT_REASONS, level), properties(P.DISCONNECT, level)),
        *([st.builds(Auth, reason(rc.AUTH_REASONS, level), properties(P.AUTH, level))] if level == MQTT_5 else []),
    )


def to_client(level: int) -> st.SearchStrategy[Packet]:
    ident = st.integers(1, 0xFFFF)
    connack_codes = rc.CONNACK_REASONS if level == MQTT_5 else frozenset(range(6))
    suback_codes = rc.SUBACK_REASONS if level == MQTT_5 else rc.SUBACK_RETURN_CODES_311
    connack = st.builds(Connack, st.booleans(), st.sampled_from(sorted(connack_codes)), properties(P.CONNACK, level))
    unsuback = (
        st.builds(
            Unsuback,
            ident,
            st.lists(st.sampled_from(sorted(rc.UNSUBACK_REASONS)), min_size=1, max_size=4),
            properties(P.UNSUBACK, level),
        )
        if level == MQTT_5
        else st.builds(Unsuback, ident)
    )
    return st.one_of(
        connack.filter(lambda c: not (c.session_present and c.reason_code)),
        publish(level, from_server=True),
        ack(Puback, rc.PUBACK_REASONS, level),
        ack(Pubrel, rc.PUBREL_REASONS, level),
        st.builds(
            Suback,
            ident,
            st.lists(st.sampled_from(sorted(suback_codes)), min_size=1, max_size=4),
            properties(P.SUBACK, level),
        ),
        unsuback,
        st.just(Pingresp()),
    )


@st.composite
def connect(draw: st.DrawFn) -> Connect:
    level = draw(st.sampled_from([MQTT_3_1, MQTT_3_1_1, MQTT_5]))
    will = None
    if draw(st.booleans()):
        will = Will(
            draw(topic),
            draw(st.binary(max_size=20)),
            draw(st.integers(0, 2)),
            draw(st.booleans()),
            draw(properties(WILL, level)),
        )
    username = draw(st.none() | text)
    password = draw(st.none() | st.binary(max_size=10)) if username is not None or level == MQTT_5 else None
    return Connect(
        draw(text),
        level,
        draw(st.booleans()),
        draw(st.integers(0, 0xFFFF)),
        username,
        password,
        will,
        draw(properties(P.CONNECT, level)),
    )


@SETTINGS
@given(data=st.data(), level=st.sampled_from([MQTT_3_1_1, MQTT_5]), role=st.sampled_from(["server", "client"]))
def test_generated_packets_round_trip(data: st.DataObject, level: int, role: str) -> None:
    packets = data.draw(st.lists(to_server(level) if role == "server" else to_client(level), min_size=1, max_size=5))
    stream = b"".join(encode(p, level) for p in packets)
    cut = data.draw(st.integers(0, len(stream)))
    decoder = Decoder(level=level, role=role)  # type: ignore[arg-type]
    assert decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) == packets


@SETTINGS
@given(connect())
def test_generated_connects_round_trip(packet: Connect) -> None:
    decoder = Decoder()
    assert decoder.feed(encode(packet, packet.protocol_level)) == [packet]
    assert decoder.level == packet.protocol_level
