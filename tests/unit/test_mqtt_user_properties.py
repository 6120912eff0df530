"""MQTT 5 user properties at the byte level (docs/brokers.md#limits): decoding is linear in the number of
properties (it rebuilt a tuple per property: 40,000 took seconds), and the decoder refuses a
packet, or a will, with more than `max_user_properties` of them with reason 0x95."""

from __future__ import annotations

import time

import pytest

from bridge.brokers.embedded.codec import (
    MQTT_5,
    Connect,
    Decoder,
    PacketTooLarge,
    Properties,
    Publish,
    ReasonCode,
    TooManyUserProperties,
    Will,
    encode,
    wire,
)
from bridge.brokers.embedded.codec import properties as props
from bridge.brokers.embedded.codec.kinds import PacketType


def property_block(count: int) -> bytes:
    """A property block of `count` user properties k<i> = v, its length first, built by hand."""
    body = b"".join(b"\x26" + wire.string(f"k{i}") + wire.string("v") for i in range(count))
    return wire.varint(len(body)) + body


def best_decode_time(block: bytes, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        _, stop = props.decode(block, 0, len(block), PacketType.CONNECT)
        best = min(best, time.perf_counter() - start)
        assert stop == len(block)
    return best


def test_user_properties_decode_in_order_with_repeats() -> None:
    block = property_block(3)
    decoded, stop = props.decode(block, 0, len(block), PacketType.PUBLISH)
    assert stop == len(block)
    assert decoded.user_property == (("k0", "v"), ("k1", "v"), ("k2", "v"))


def test_a_second_copy_of_a_single_property_is_still_a_protocol_error() -> None:
    body = b"\x02\x00\x00\x00\x05" * 2  # message expiry interval twice
    block = wire.varint(len(body)) + body
    with pytest.raises(Exception, match="appears twice"):
        props.decode(block, 0, len(block), PacketType.PUBLISH)


def test_decoding_grows_linearly_with_the_number_of_user_properties() -> None:
    """Ten times the properties cost about ten times the time, not a hundred (quadratic). The
    ratio, taken from the best of three runs each, does not depend on the machine's speed; the
    bound (30) leaves room for noise and is far under what the quadratic decoder gave (~100)."""
    small, large = property_block(4_000), property_block(40_000)
    assert props.decode(large, 0, len(large), PacketType.CONNECT)[0].user_property[-1] == ("k39999", "v")
    ratio = best_decode_time(large) / best_decode_time(small)
    assert ratio < 30, f"40,000 properties cost {ratio:.0f}x what 4,000 cost"


def test_the_decoder_refuses_more_user_properties_than_its_limit() -> None:
    pairs = tuple((f"k{i}", "v") for i in range(11))
    publish = Publish("t", b"x", 1, packet_id=1, properties=Properties(user_property=pairs))
    data = encode(publish, MQTT_5)
    assert Decoder(level=MQTT_5, max_user_properties=11).feed(data)[0] == publish  # at the limit
    assert Decoder(level=MQTT_5).feed(data)[0] == publish  # 0: no limit
    with pytest.raises(TooManyUserProperties) as refused:
        Decoder(level=MQTT_5, max_user_properties=10).feed(data)
    assert isinstance(refused.value, PacketTooLarge) and refused.value.reason == ReasonCode.PACKET_TOO_LARGE


def test_a_will_is_counted_apart_and_a_refused_connect_names_its_level() -> None:
    pairs = tuple((f"k{i}", "v") for i in range(5))
    will = Will("w", b"bye", properties=Properties(user_property=pairs))
    connect = Connect("c", protocol_level=MQTT_5, will=will, properties=Properties(user_property=pairs[:2]))
    data = encode(connect, MQTT_5)
    assert Decoder(max_user_properties=5).feed(data)[0] == connect
    with pytest.raises(TooManyUserProperties) as refused:
        Decoder(max_user_properties=4).feed(data)
    assert refused.value.level == MQTT_5  # the broker can answer with a 5.0 CONNACK 0x95
