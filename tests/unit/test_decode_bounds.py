"""Limits enforced while decoding (codec/bounds.py, docs/security.md#what-each-limit-bounds): a
packet over a bound is refused at the item past it, not after every item was decoded. The
items read are counted by wrapping the codec's own readers, or, for the entry bounds, shown by an
unreadable entry just past the bound (which holds for the compiled codec too)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bridge.brokers.embedded.codec import (
    MQTT_3_1_1,
    MQTT_5,
    Bounds,
    Connect,
    DataType,
    Decoder,
    MalformedPacket,
    Properties,
    Publish,
    ReasonCode,
    Subscribe,
    Subscription,
    TooManyEntries,
    TooManyTopicLevels,
    TooManyUserProperties,
    Unsubscribe,
    Will,
    bodies,
    encode,
    wire,
)
from bridge.brokers.embedded.codec import properties as props

BIG = 8 << 20  # max_packet_size: room for the floods below


def counting(monkeypatch: pytest.MonkeyPatch, table: dict[Any, Any] | Any, key: Any) -> list[int]:
    """Count the calls of table[key] (a dict entry or a module attribute)."""
    calls = [0]
    original: Callable[..., Any] = table[key] if isinstance(table, dict) else getattr(table, key)

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return original(*args)

    if isinstance(table, dict):
        monkeypatch.setitem(table, key, counted)
    else:
        monkeypatch.setattr(table, key, counted)
    return calls


def publish_with_empty_user_properties(count: int) -> bytes:
    """A 5.0 PUBLISH carrying `count` empty user properties (name "" and value ""), built by hand."""
    block = b"\x26\x00\x00\x00\x00" * count
    body = wire.string("t") + wire.varint(len(block)) + block + b"x"
    return bytes([0x30]) + wire.varint(len(body)) + body


def test_200000_empty_user_properties_are_refused_at_the_1025th(monkeypatch: pytest.MonkeyPatch) -> None:
    read = counting(monkeypatch, props._READERS, DataType.UTF8_STRING_PAIR)
    decoder = Decoder(BIG, level=MQTT_5, max_user_properties=1024)
    with pytest.raises(TooManyUserProperties) as refused:
        decoder.feed(publish_with_empty_user_properties(200_000))
    assert refused.value.reason == ReasonCode.PACKET_TOO_LARGE
    assert read[0] == 1025  # not 200,000


def test_a_packet_at_the_user_property_limit_is_decoded_whole() -> None:
    packet = Decoder(BIG, level=MQTT_5, max_user_properties=1024).feed(publish_with_empty_user_properties(1024))[0]
    assert isinstance(packet, Publish) and len(packet.properties.user_property) == 1024


def test_a_will_counts_its_user_properties_apart_while_decoding() -> None:
    pairs = tuple((f"k{i}", "v") for i in range(5))
    will = Will("w", b"bye", properties=Properties(user_property=pairs))
    data = encode(Connect("c", MQTT_5, will=will, properties=Properties(user_property=pairs)), MQTT_5)
    assert Decoder(bounds=Bounds(user_properties=5)).feed(data)[0].will == will
    with pytest.raises(TooManyUserProperties):
        Decoder(bounds=Bounds(user_properties=4)).feed(data)


def with_an_unreadable_entry_after(packet: bytes) -> bytes:
    """`packet` (a SUBSCRIBE or UNSUBSCRIBE) with one more entry that cannot be read: a string
    whose length runs past the packet's end. A decoder that reads it refuses the packet as
    malformed; one that stops at its entry bound first never sees it. Unlike counting calls with
    monkeypatch, this holds for the compiled codec too (docs/development.md#the-compiled-build)."""
    length_bytes = next(i for i in range(1, 5) if packet[i] < 0x80)  # the remaining length's varint
    body = packet[1 + length_bytes :] + b"\xff\xff" + b"f" * 8
    return packet[:1] + wire.varint(len(body)) + body


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_a_subscribe_with_too_many_filters_is_refused_at_the_one_past_the_bound(level: int) -> None:
    at_bound = encode(Subscribe(1, [Subscription(f"f/{i}", 0) for i in range(10_000)]), level)
    assert len(Decoder(BIG, level=level, bounds=Bounds(entries=10_000)).feed(at_bound)[0].subscriptions) == 10_000
    with pytest.raises(TooManyEntries) as refused:  # the 10,001st is not read
        Decoder(BIG, level=level, bounds=Bounds(entries=10_000)).feed(with_an_unreadable_entry_after(at_bound))
    assert refused.value.reason == ReasonCode.PACKET_TOO_LARGE
    with pytest.raises(MalformedPacket):  # what reading it would have said
        Decoder(BIG, level=level, bounds=Bounds(entries=10_001)).feed(with_an_unreadable_entry_after(at_bound))


def test_an_unsubscribe_with_too_many_filters_is_refused_while_decoding() -> None:
    at_bound = encode(Unsubscribe(1, [f"f/{i}" for i in range(100)]), MQTT_3_1_1)
    assert len(Decoder(level=MQTT_3_1_1, bounds=Bounds(entries=100)).feed(at_bound)[0].topic_filters) == 100
    with pytest.raises(TooManyEntries):
        Decoder(BIG, level=MQTT_3_1_1, bounds=Bounds(entries=100)).feed(with_an_unreadable_entry_after(at_bound))
    with pytest.raises(MalformedPacket):
        Decoder(BIG, level=MQTT_3_1_1, bounds=Bounds(entries=101)).feed(with_an_unreadable_entry_after(at_bound))


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_a_publish_topic_over_the_levels_is_refused_before_it_is_decoded(level: int) -> None:
    deep = "/".join(["é"] * 20_000)  # not ASCII: its UTF-8 check is what is skipped
    data = encode(Publish(deep, b"x"), level)
    with pytest.raises(TooManyTopicLevels) as refused:
        Decoder(BIG, level=level, bounds=Bounds(topic_levels=64)).feed(data)
    assert refused.value.reason == ReasonCode.TOPIC_NAME_INVALID
    at_bound = encode(Publish("/".join(["a"] * 64), b"x"), level)
    assert Decoder(level=level, bounds=Bounds(topic_levels=64)).feed(at_bound)[0].topic.count("/") == 63


def test_a_will_topic_over_the_levels_is_left_to_the_broker() -> None:
    """Its refusal is a CONNACK (return code 5 / 0x90) a 3.1.1 client can read: broker.connect."""
    will = Will("/".join(["a"] * 65), b"bye")
    data = encode(Connect("c", MQTT_3_1_1, will=will), MQTT_3_1_1)
    assert Decoder(bounds=Bounds(topic_levels=64)).feed(data)[0].will == will


def test_a_filter_over_the_levels_is_kept_unparsed_for_the_broker_to_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = counting(monkeypatch, bodies, "subscription_filter_error")
    deep = "/".join(["a"] * 30_000)
    packet = Decoder(BIG, level=MQTT_5, bounds=Bounds(topic_levels=64)).feed(
        encode(Subscribe(1, [Subscription(deep, 0), Subscription("ok/#", 0)]), MQTT_5)
    )[0]
    assert [s.topic_filter for s in packet.subscriptions] == [deep, "ok/#"]
    assert parsed[0] == 1  # only "ok/#" was split into its levels
