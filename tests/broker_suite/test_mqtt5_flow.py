"""MQTT 5.0 flow control and size limits in both directions, PUBACK reason codes, topic aliases.

The broker's own limits are read from its CONNACK (Receive Maximum, Maximum Packet Size, Topic
Alias Maximum), so the tests hold any broker to what it announces. paho does not enforce the
server's limits on what it sends, which is what lets a test exceed them.
"""

from __future__ import annotations

from collections.abc import Callable

from paho.mqtt.packettypes import PacketTypes

from broker_suite.brokers import Broker
from support import frames
from support.mqtt import Client, Message, connect_v5, unique
from support.mqtt_properties import props
from support.raw import RawClient

Clients = Callable[..., Client]

NO_MATCHING_SUBSCRIBERS = 0x10
PAYLOAD_FORMAT_INVALID = 0x99
RECEIVE_MAXIMUM_EXCEEDED = 0x93  # DISCONNECT
TOPIC_ALIAS_INVALID = 0x94
PACKET_TOO_LARGE = 0x95


async def test_puback_reason_codes(clients: Clients) -> None:
    topic = unique("rc")
    sub, _ = await connect_v5(clients, unique("sub"))
    await sub.subscribe(topic, 1)
    pub, _ = await connect_v5(clients, unique("pub"))
    assert await pub.publish(topic, b"matched", 1) == 0
    # "no matching subscribers" is optional (5.0 section 3.4.2.1): success or 0x10
    assert await pub.publish(unique("nobody"), b"unmatched", 1) in (0, NO_MATCHING_SUBSCRIBERS)
    # payload format 1 promises UTF-8; checking is optional (5.0 section 3.3.2.3.2): a broker
    # that checks answers 0x99 and routes nothing, one that does not passes the bytes on unchanged
    utf8 = props(PacketTypes.PUBLISH, PayloadFormatIndicator=1)
    checked = await pub.publish(topic, b"\xff\xfe not UTF-8", 1, properties=utf8)
    assert checked in (0, PAYLOAD_FORMAT_INVALID)
    assert await pub.publish(topic, b"marker", 1) == 0
    routed = [b"matched"] + ([b"\xff\xfe not UTF-8"] if checked == 0 else [])
    assert [m.payload for m in await sub.until(topic, b"marker")] == routed


async def test_client_receive_maximum_bounds_what_the_broker_has_in_flight(clients: Clients) -> None:
    topic = unique("crm")
    sub, _ = await connect_v5(clients, unique("sub"), manual_ack=True, ReceiveMaximum=2)
    await sub.subscribe(topic, 1)
    witness, _ = await connect_v5(clients, unique("witness"))
    await witness.subscribe(topic, 1)
    pub, _ = await connect_v5(clients, unique("pub"))
    for n in range(5):
        await pub.publish(topic, f"m{n}".encode(), 1)
    await pub.publish(topic, b"marker", 0)
    assert len(await witness.until(topic, b"marker")) == 5  # the broker has routed all five

    in_flight = await sub.expect(2)
    assert [m.payload for m in in_flight] == [b"m0", b"m1"]
    # Nothing more at QoS > 0 until an ack; the QoS 0 marker may pass the held messages or wait
    # behind them (5.0 section 4.9: either is allowed).
    waiting = []
    while not sub.messages.empty():
        waiting.append(sub.messages.get_nowait())
    assert [m.payload for m in waiting if m.qos > 0] == []
    for expected in (b"m2", b"m3", b"m4"):  # each ack lets the next one out
        sub.ack(in_flight.pop(0))
        in_flight.append(await _next_qos1(sub))
        assert in_flight[-1].payload == expected


async def _next_qos1(client: Client) -> Message:
    while (message := await client.message()).qos == 0:
        pass
    return message


async def test_server_receive_maximum_exceeded_is_refused(broker: Broker, clients: Clients) -> None:
    """QoS 2 publishes whose PUBREL is withheld stay in flight at the broker; one more than its
    Receive Maximum is refused, by DISCONNECT 0x93 or by a PUBREC with a failure reason code
    (5.0 sections 3.3.4 and 4.13), and never routed. paho always sends PUBREL, so raw bytes."""
    topic = unique("srm")
    sub, _ = await connect_v5(clients, unique("sub"))
    await sub.subscribe(topic, 2)
    _probe, connack = await connect_v5(clients, unique("probe"))
    receive_maximum = connack.properties.get("ReceiveMaximum", 65535)
    # Mosquitto announces 20, the embedded broker 1024 (acks wait for commits, so publishers
    # pipeline); either way a bound is announced.
    assert receive_maximum < 65535, "the broker announces no Receive Maximum"
    client = await RawClient.open(broker.port)
    try:
        await client.send_bytes(frames.connect(unique("greedy"), version=5))
        assert (await client.next_frame()).reason == 0
        for packet_id in range(1, receive_maximum + 2):
            await client.send_bytes(frames.publish(topic, b"m%d" % packet_id, qos=2, packet_id=packet_id, version=5))
            answer = await client.next_frame()
            if packet_id <= receive_maximum:
                assert (answer.kind, answer.body) == (frames.PUBREC, answer.body[:2])  # accepted, no reason code
        if answer.kind == frames.DISCONNECT:
            assert answer.reason == RECEIVE_MAXIMUM_EXCEEDED
        else:
            assert answer.kind == frames.PUBREC and answer.body[2] >= 0x80
            for packet_id in range(1, receive_maximum + 1):  # release the accepted ones
                await client.send_bytes(frames.ack(frames.PUBREL, packet_id))
                assert (await client.next_frame()).kind == frames.PUBCOMP
    finally:
        client.abort()
    pub, _ = await connect_v5(clients, unique("pub"))
    await pub.publish(topic, b"marker", 2)
    routed = {m.payload for m in await sub.until(topic, b"marker")}
    assert b"m%d" % (receive_maximum + 1) not in routed


async def test_client_maximum_packet_size_drops_larger_messages_for_that_client(clients: Clients) -> None:
    topic = unique("cmps")
    small, _ = await connect_v5(clients, unique("small"), MaximumPacketSize=256)
    await small.subscribe(topic, 1)
    large, _ = await connect_v5(clients, unique("large"))
    await large.subscribe(topic, 1)
    pub, _ = await connect_v5(clients, unique("pub"))
    await pub.publish(topic, b"x" * 1000, 1)
    await pub.publish(topic, b"marker", 1)
    assert [len(m.payload) for m in await small.until(topic, b"marker")] == []
    assert [len(m.payload) for m in await large.until(topic, b"marker")] == [1000]


async def test_server_maximum_packet_size_exceeded_disconnects_0x95(clients: Clients) -> None:
    topic = unique("smps")
    sub, _ = await connect_v5(clients, unique("sub"))
    await sub.subscribe(topic, 1)
    big, connack = await connect_v5(clients, unique("big"))
    limit = connack.properties.get("MaximumPacketSize")
    assert limit, "the broker announces no Maximum Packet Size"
    big.send(topic, b"x" * limit, 1)  # payload alone at the limit: the packet is larger
    reason, _ = await big.wait_disconnected()
    assert reason == PACKET_TOO_LARGE
    pub, _ = await connect_v5(clients, unique("pub"))
    await pub.publish(topic, b"marker", 1)
    assert await sub.until(topic, b"marker") == []  # nothing of it was routed


async def test_topic_alias_from_client_to_broker(clients: Clients) -> None:
    topic = unique("alias")
    sub, _ = await connect_v5(clients, unique("sub"))
    await sub.subscribe(f"{topic}/#", 1)
    pub, connack = await connect_v5(clients, unique("pub"))
    alias_maximum = connack.properties.get("TopicAliasMaximum", 0)
    assert alias_maximum >= 1, "the broker accepts no topic aliases"
    await pub.publish(f"{topic}/a", b"sets alias 1", 1, properties=props(PacketTypes.PUBLISH, TopicAlias=1))
    await pub.publish("", b"uses alias 1", 1, properties=props(PacketTypes.PUBLISH, TopicAlias=1))
    await pub.publish(f"{topic}/b", b"remaps alias 1", 1, properties=props(PacketTypes.PUBLISH, TopicAlias=1))
    await pub.publish("", b"uses it again", 1, properties=props(PacketTypes.PUBLISH, TopicAlias=1))
    got = await sub.expect(4)
    assert [(m.topic, m.payload) for m in got] == [
        (f"{topic}/a", b"sets alias 1"),
        (f"{topic}/a", b"uses alias 1"),
        (f"{topic}/b", b"remaps alias 1"),
        (f"{topic}/b", b"uses it again"),
    ]
    assert all("TopicAlias" not in m.properties for m in got)  # the subscriber allowed none

    pub.send(f"{topic}/c", b"alias too high", 1, properties=props(PacketTypes.PUBLISH, TopicAlias=alias_maximum + 1))
    reason, _ = await pub.wait_disconnected()
    assert reason == TOPIC_ALIAS_INVALID
