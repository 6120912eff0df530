"""Decoder.feed(data, limit): at most `limit` packets per call, the bytes past them held, in order,
for the next call (a connection's budget per loop turn: connection.TURN_PACKETS)."""

from __future__ import annotations

from bridge.brokers.embedded.codec import MQTT_3_1_1, Decoder, Pingreq, Publish, encode


def test_a_limited_feed_holds_the_rest_and_goes_on_in_order() -> None:
    publishes = [Publish(f"t/{i}", b"x" * i, 1, packet_id=i + 1) for i in range(10)]
    data = b"".join(encode(p, MQTT_3_1_1) for p in publishes)
    decoder = Decoder(level=MQTT_3_1_1)
    got = decoder.feed(data[:-3], limit=4)  # the last packet incomplete
    assert got == publishes[:4] and decoder.held
    assert decoder.feed(b"", limit=4) == publishes[4:8]
    assert decoder.feed(b"", limit=4) == publishes[8:9]  # the partial tenth waits for its bytes
    assert not decoder.held and decoder.buffered == len(encode(publishes[9], MQTT_3_1_1)) - 3
    assert decoder.feed(data[-3:], limit=4) == publishes[9:]
    assert decoder.buffered == 0


def test_new_bytes_join_what_a_limited_feed_held() -> None:
    ping = encode(Pingreq(), MQTT_3_1_1)
    decoder = Decoder(level=MQTT_3_1_1)
    assert len(decoder.feed(ping * 300, limit=256)) == 256
    assert decoder.buffered == 44 * len(ping)
    assert len(decoder.feed(ping * 10, limit=256)) == 54
    assert decoder.buffered == 0 and not decoder.held


def test_no_limit_decodes_everything() -> None:
    ping = encode(Pingreq(), MQTT_3_1_1)
    assert len(Decoder(level=MQTT_3_1_1).feed(ping * 1000)) == 1000


def test_kept_bytes_are_decoded_next_after_what_was_held() -> None:
    ping = encode(Pingreq(), MQTT_3_1_1)
    publish = Publish("t", b"x" * 10, 1, packet_id=1)
    decoder = Decoder(level=MQTT_3_1_1)
    assert len(decoder.feed(ping * 5, limit=2)) == 2
    data = encode(publish, MQTT_3_1_1)
    decoder.keep(data[:5])  # a partial packet joins what is held
    decoder.keep(data[5:])
    assert decoder.feed(b"", limit=10) == [Pingreq()] * 3 + [publish]
    decoder.feed(data[:4])  # a partial packet, then kept bytes complete it
    decoder.keep(data[4:] + ping)
    assert decoder.feed(b"") == [publish, Pingreq()]
