"""QoS 2 from a client to the embedded broker past its receive maximum (docs/brokers.md#exactly-once).

The broker holds the packet id of every QoS 2 PUBLISH until its PUBREL; more exchanges in
progress than it announced as Receive Maximum (1,024) is a protocol violation: DISCONNECT 0x93
for 5.0 (5.0 section 4.9), the connection closed for 3.1.1, which has no reason codes. Nothing
of the excess PUBLISH is passed on, and every message passed on got its PUBREC, so a client that
resends what was not acknowledged makes no duplicate. Bare sockets: paho always sends PUBREL.
"""

from __future__ import annotations

from typing import Any

import pytest

from bridge.app import Bridge
from bridge.brokers.embedded.channel import RECEIVE_MAXIMUM
from bridge.brokers.embedded.codec import MQTT_3_1_1, MQTT_5, Disconnect, Publish, Pubrec, encode
from support.bridges import BridgeFactory, mqtt_port
from support.raw import RawClient


@pytest.fixture
async def bridge(make_bridge: BridgeFactory) -> Bridge:
    return await make_bridge(rules="", pools="")  # the embedded broker alone


async def _subscriber(port: int, topic: str) -> RawClient:
    sub, connack = await RawClient.connect(port, "q2-sub", level=MQTT_5)
    assert connack is not None and connack.reason_code == 0
    assert (await sub.subscribe(1, (topic, 0))).reason_codes == [0]
    return sub


async def _payloads_until_marker(sub: RawClient) -> list[bytes]:
    got = []
    while (packet := await sub.recv()).payload != b"marker":
        assert isinstance(packet, Publish)
        got.append(packet.payload)
    return got


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5], ids=["3.1.1", "5.0"])
async def test_past_the_receive_maximum_of_qos2_the_client_is_disconnected(bridge: Bridge, level: int) -> None:
    port = mqtt_port(bridge)
    topic = "q2/excess"
    sub = await _subscriber(port, topic)
    greedy, connack = await RawClient.connect(port, "q2-greedy", level=level)
    assert connack is not None
    ids = range(1, RECEIVE_MAXIMUM + 2)  # one exchange more than the broker allows
    # All in one write, none released: the refusal of the last finds the others still queued.
    await greedy.send_bytes(b"".join(encode(Publish(topic, b"m%d" % n, 2, packet_id=n), level) for n in ids))
    answers: list[Any] = await greedy.until_closed(timeout=15)
    if level == MQTT_5:
        assert answers[-1] == Disconnect(0x93)
        answers = answers[:-1]
    assert all(isinstance(answer, Pubrec) and answer.reason_code == 0 for answer in answers), answers[-3:]
    acknowledged = [answer.packet_id for answer in answers]
    assert RECEIVE_MAXIMUM + 1 not in acknowledged

    publisher, _ = await RawClient.connect(port, "q2-marker", level=MQTT_5)
    await publisher.send(Publish(topic, b"marker", 0))
    delivered = await _payloads_until_marker(sub)
    assert b"m%d" % (RECEIVE_MAXIMUM + 1) not in delivered  # nothing of the excess PUBLISH
    # what was passed on is exactly what was acknowledged: a resend of the rest is no duplicate
    assert delivered == [b"m%d" % n for n in acknowledged]
    assert bridge.broker.refused["receive_maximum"] == 1
    for client in (sub, publisher):
        client.abort()
