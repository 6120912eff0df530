"""A durable session's client sees a QoS 2 packet id, a PUBREL or a PUBCOMP only once the
durable store holds the state it announces (bridge/brokers/embedded/aftercommit.py), so a
`kill -9` at any moment leaves the broker where its client thinks it is.

The commits are slowed to one per 500 ms (`broker.durable_commit_interval`), and the bridge is
killed as soon as the client has the packet: a broker that sent it before its commit comes back
behind the client. Without the rule (found by tests/integration/test_soak.py: one QoS 2 message
of 8,837 not counted by a durable subscriber after the crash), each test here fails: the messages
in flight come back as new ones under other packet ids, the PUBLISH comes again after its
PUBREL, the publisher's next message under a freed packet id is taken for a resend and dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bridge.brokers.embedded.codec import Connack, Puback, Pubcomp, Publish, Pubrec, Pubrel, Unsuback, Unsubscribe
from support.process import BridgeProcess
from support.raw import RawClient, brief

RawConnect = Callable[..., Awaitable[tuple[RawClient, Any]]]


async def _bridge(home: Path, bridges: list[BridgeProcess]) -> BridgeProcess:
    extra = (
        f"broker.durable_sessions = on\nbroker.durable_dir = {home / 'store'}\nbroker.durable_commit_interval = 500ms\n"
    )
    bridge = BridgeProcess(home, "", "", extra)
    bridges.append(bridge)
    await asyncio.to_thread(bridge.start)
    await asyncio.to_thread(bridge.wait_for, bridge.ready, "the bridge to be ready")
    return bridge


async def _kill_and_start(bridge: BridgeProcess) -> None:
    bridge.kill()
    await asyncio.to_thread(bridge.start)
    await asyncio.to_thread(bridge.wait_for, bridge.ready, "the bridge to be ready again")


async def _durable(raw_connect: RawConnect, port: int, client_id: str) -> RawClient:
    client, connack = await raw_connect(port, client_id, clean_session=False)
    assert isinstance(connack, Connack) and connack.reason_code == 0, connack
    return client


async def _subscribed(
    home: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> tuple[BridgeProcess, RawClient, RawClient]:
    """The bridge, a durable subscriber on ac/# at QoS 2, and a publisher."""
    bridge = await _bridge(home, bridges)
    subscriber = await _durable(raw_connect, bridge.mqtt_port, "ac-sub")
    assert (await subscriber.subscribe(1, ("ac/#", 2))).reason_codes == [2]
    publisher, _ = await raw_connect(bridge.mqtt_port, "ac-pub")
    return bridge, subscriber, publisher


async def _publish_qos2(publisher: RawClient, topic: str, payload: bytes, packet_id: int) -> None:
    """One QoS 2 exchange from the publisher's side, to its PUBCOMP."""
    await publisher.send(Publish(topic, payload, qos=2, packet_id=packet_id))
    assert await publisher.recv(timeout=10) == Pubrec(packet_id)
    await publisher.send(Pubrel(packet_id))
    assert await publisher.recv(timeout=10) == Pubcomp(packet_id)


async def _receive_qos2(subscriber: RawClient, count: int) -> list[Publish]:
    got = []
    for _ in range(count):
        packet = await subscriber.recv(timeout=10)
        assert isinstance(packet, Publish) and packet.qos == 2, packet and brief(packet)
        got.append(packet)
    return got


async def test_qos2_messages_in_flight_at_kill_9_come_back_under_their_packet_ids(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    bridge, subscriber, publisher = await _subscribed(tmp_path, bridges, raw_connect)
    port = bridge.mqtt_port
    # two whole exchanges first: the packet ids of the next messages are not the first ones
    for n in (1, 2):
        await _publish_qos2(publisher, "ac/x", b"done-%d" % n, n)
        (done,) = await _receive_qos2(subscriber, 1)
        await subscriber.send(Pubrec(done.packet_id))
        assert await subscriber.recv(timeout=10) == Pubrel(done.packet_id)
        await subscriber.send(Pubcomp(done.packet_id))
    subscriber.abort()
    for n in (3, 4, 5):  # queued for the session while it is away, and stored (each PUBREC says so)
        await _publish_qos2(publisher, "ac/x", b"queued-%d" % n, n)
    subscriber = await _durable(raw_connect, port, "ac-sub")
    before = await _receive_qos2(subscriber, 3)
    assert [p.payload for p in before] == [b"queued-3", b"queued-4", b"queued-5"]
    assert len({p.packet_id for p in before} | {1, 2}) == 5, [p.packet_id for p in before]
    await _kill_and_start(bridge)  # the client holds these ids until their PUBREL (MQTT 4.3.3)

    subscriber = await _durable(raw_connect, port, "ac-sub")
    after = await _receive_qos2(subscriber, 3)
    assert [(p.payload, p.packet_id, p.dup) for p in after] == [(p.payload, p.packet_id, True) for p in before]


async def test_a_publish_is_not_sent_again_after_its_pubrel_whenever_the_broker_dies(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    bridge, subscriber, publisher = await _subscribed(tmp_path, bridges, raw_connect)
    port = bridge.mqtt_port
    await _publish_qos2(publisher, "ac/x", b"once", 1)
    (message,) = await _receive_qos2(subscriber, 1)
    await subscriber.send(Pubrec(message.packet_id))
    assert await subscriber.recv(timeout=10) == Pubrel(message.packet_id)  # the client forgets the message here
    await _kill_and_start(bridge)

    subscriber = await _durable(raw_connect, port, "ac-sub")
    again = await subscriber.recv(timeout=10)
    assert again == Pubrel(message.packet_id), brief(again)  # never the PUBLISH: that would be a second delivery


async def test_a_packet_id_freed_by_pubcomp_is_free_after_kill_9(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    bridge = await _bridge(tmp_path, bridges)
    port = bridge.mqtt_port
    subscriber = await _durable(raw_connect, port, "ac-sub")
    assert (await subscriber.subscribe(1, ("ac/#", 1))).reason_codes == [1]
    publisher = await _durable(raw_connect, port, "ac-durable-pub")
    await _publish_qos2(publisher, "ac/x", b"first", 7)  # its PUBCOMP: the client may use id 7 again
    await _kill_and_start(bridge)

    publisher = await _durable(raw_connect, port, "ac-durable-pub")
    await _publish_qos2(publisher, "ac/x", b"second", 7)  # a new message (DUP 0), not a resend
    subscriber = await _durable(raw_connect, port, "ac-sub")
    payloads = []
    while b"second" not in payloads:
        packet = await subscriber.recv(timeout=10)
        assert isinstance(packet, Publish), f"{packet and brief(packet)} after {payloads}"
        payloads.append(packet.payload)
        await subscriber.send(Puback(packet.packet_id))
    assert payloads.count(b"second") == 1


async def test_a_subscription_acknowledged_is_there_after_kill_9_and_one_unsubscribed_is_gone(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect
) -> None:
    """SUBACK and UNSUBACK wait for the commit of the subscriptions they announce. Sent before
    it, a kill -9 in the commit window brought the session back (session present) without the
    filter its client was told it had, so the client never subscribed again and its messages
    were never routed to it; or with the filter it was told was gone."""
    bridge = await _bridge(tmp_path, bridges)
    port = bridge.mqtt_port
    subscriber = await _durable(raw_connect, port, "ac-sub")
    stored = lambda: bridge.metric("hookbridge_broker_durable_sessions") == 1  # noqa: E731
    await asyncio.to_thread(bridge.wait_for, stored, "the session in the store")  # its row, no filter yet
    assert (await subscriber.subscribe(1, ("ac/keep/#", 1), ("ac/drop/#", 1))).reason_codes == [1, 1]
    await _kill_and_start(bridge)  # the moment the client has its SUBACK

    publisher, _ = await raw_connect(port, "ac-pub")
    subscriber, connack = await raw_connect(port, "ac-sub", clean_session=False)
    assert connack.session_present
    await publisher.send(Publish("ac/keep/1", b"kept", qos=1, packet_id=1))
    assert await publisher.recv(timeout=10) == Puback(1)
    got = await subscriber.recv(timeout=10)
    assert isinstance(got, Publish) and got.payload == b"kept", got and brief(got)
    await subscriber.send(Puback(got.packet_id))

    await subscriber.send(Unsubscribe(2, ["ac/drop/#"]))
    assert isinstance(await subscriber.recv(timeout=10), Unsuback)
    await _kill_and_start(bridge)  # the moment the client has its UNSUBACK

    publisher, _ = await raw_connect(port, "ac-pub")
    subscriber, connack = await raw_connect(port, "ac-sub", clean_session=False)
    assert connack.session_present
    for packet_id, (topic, payload) in enumerate([("ac/drop/2", b"unsubscribed"), ("ac/keep/3", b"after")], 1):
        await publisher.send(Publish(topic, payload, qos=1, packet_id=packet_id))
        assert await publisher.recv(timeout=10) == Puback(packet_id)
    got = await subscriber.recv(timeout=10)  # one publisher's messages arrive in order: "after" first
    assert isinstance(got, Publish) and got.payload == b"after", got and brief(got)
