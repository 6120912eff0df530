"""The bridge's functions for MQTT 5.0 sessions (docs/rules.md#function-the-built-in-function-set, docs/brokers.md#what-it-guarantees): offline fetch, pubsub
offsets, proxy subscription, retain lookup (and retain handling), paging and message expiry, and
what 5.0 adds around them (subscription identifiers on what the bridge sends, a PUBACK that
refuses, topic aliases), through the embedded broker, real Redis and the shipped
`rules/redis.conf`, with paho-mqtt v2 speaking 5.0 (a raw client where paho will not misbehave).

A 5.0 session is persistent for the fetch when its session expiry interval is > 0 (clean start
alone says nothing). A restarted bridge has no broker sessions, so what a client gets after it
comes from Redis only. Negative checks publish a marker after everything the bridge could have
sent and assert the marker comes first (deliveries to one client keep their queue order); where
the bridge itself sends (fetch, retain lookup) `bridge.idle()` first waits until it has.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis as redis_sync
from paho.mqtt.packettypes import PacketTypes

from bridge.app import Bridge
from bridge.brokers.embedded.codec import MQTT_5, Properties, Puback
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import V5, Client, ConnAck, Message, wait_until
from support.mqtt_properties import props
from support.services import ROOT

PERSISTENT = 3600  # a session expiry interval > 0: persistent for the fetch


class V5Clients:
    """paho-mqtt 5.0 clients of the bridges a test starts, all stopped at teardown."""

    def __init__(self) -> None:
        self.made: list[Client] = []

    async def connect(
        self, bridge: Bridge, clientid: str, *, expiry: int | None = None, clean: bool = True
    ) -> tuple[Client, ConnAck]:
        """A connected 5.0 client; `expiry`: its Session Expiry Interval (absent: 0), `clean`: Clean Start."""
        client = Client(mqtt_port(bridge), clientid, version=V5, clean=clean)
        self.made.append(client)
        properties = None if expiry is None else props(PacketTypes.CONNECT, SessionExpiryInterval=expiry)
        connack = await client.connect(properties=properties)
        assert connack.reason == 0, connack
        return client, connack


@pytest.fixture
async def v5() -> AsyncIterator[V5Clients]:
    clients = V5Clients()
    yield clients
    for client in clients.made:
        await client.close()


def payloads(messages: list[Message]) -> list[bytes]:
    return [m.payload for m in messages]


async def nothing_more(client: Client, publisher: Client, topic: str) -> None:
    """Nothing queued for `client` before a marker published now (it must be subscribed to `topic`)."""
    await publisher.publish(topic, b"marker", qos=1)
    assert payloads(await client.until(topic, b"marker")) == []


def stored_ids(redis_db: redis_sync.Redis, topic: str) -> list[bytes]:
    """The message ids Redis holds for a topic, oldest first (`mqtt:msg:<topic>`)."""
    return list(redis_db.zrange(f"mqtt:msg:{topic}", 0, -1))


# -- offline fetch for a queue subscription ------------------------------------------------------


async def test_queue_fetch_after_restart_for_a_session_with_expiry(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients
) -> None:
    bridge = await make_bridge()
    worker, _ = await v5.connect(bridge, "w5", expiry=PERSISTENT, clean=False)
    assert await worker.subscribe("queue/#", 1) == [1]
    await worker.disconnect()
    publisher, _ = await v5.connect(bridge, "pub")
    for n in range(3):
        await publisher.publish("queue/jobs", f"early {n}".encode(), qos=1)

    # same bridge: the session is resumed and its own queue delivers; subscribing again to the
    # filter it has is not a new subscription, so no fetch sends the same messages a second time
    worker, connack = await v5.connect(bridge, "w5", expiry=PERSISTENT, clean=False)
    assert connack.session_present
    assert await worker.subscribe("queue/#", 1) == [1]
    await bridge.idle()
    assert payloads(await worker.expect(3)) == [b"early 0", b"early 1", b"early 2"]
    await nothing_more(worker, publisher, "queue/marker")
    # the acks of a queue subscription delete the messages for everyone
    await wait_until(lambda: stored_ids(redis_db, "queue/jobs") == [], what="the queue acks to delete")
    await worker.disconnect()

    for n in range(4):
        await publisher.publish("queue/jobs", f"missed {n}".encode(), qos=1)
    await publisher.publish("queue/other", b"other", qos=2)
    await publisher.disconnect()
    await bridge.stop()  # the broker's own queue is gone: only Redis has the messages

    bridge = await make_bridge()
    worker, connack = await v5.connect(bridge, "w5", expiry=PERSISTENT, clean=False)
    assert not connack.session_present
    assert await worker.subscribe("queue/#", 1) == [1]
    got = await worker.expect(5)
    # merged over the matching topics in publish order, each once
    assert [(m.topic, m.payload) for m in got] == [
        *[("queue/jobs", f"missed {n}".encode()) for n in range(4)],
        ("queue/other", b"other"),
    ]
    assert [m.qos for m in got] == [1] * 5  # min(stored QoS, subscription QoS)
    await bridge.idle()
    publisher, _ = await v5.connect(bridge, "pub")
    await nothing_more(worker, publisher, "queue/marker")
    await wait_until(
        lambda: stored_ids(redis_db, "queue/jobs") == stored_ids(redis_db, "queue/other") == [],
        what="the fetched messages to be acked away",
    )


@pytest.mark.parametrize("clean_start", [False, True], ids=["clean_start_0", "clean_start_1"])
async def test_session_expiry_0_is_not_persistent(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients, clean_start: bool
) -> None:
    """Expiry 0 (the default) ends the session with its connection, whatever Clean Start says:
    no offline fetch, as for a clean 3.1.1 session, on the same bridge or after a restart; the
    messages stay in Redis for the others."""
    bridge = await make_bridge()
    worker, _ = await v5.connect(bridge, "w0", clean=clean_start)
    await worker.subscribe("queue/#", 1)
    await worker.disconnect()
    publisher, _ = await v5.connect(bridge, "pub")
    for n in range(3):
        await publisher.publish("queue/jobs", f"missed {n}".encode(), qos=1)

    worker, connack = await v5.connect(bridge, "w0", clean=clean_start)
    assert not connack.session_present  # the session ended with the first connection
    await worker.subscribe("queue/#", 1)
    await bridge.idle()  # a fetch, had one run, would have queued its messages by now
    await nothing_more(worker, publisher, "queue/marker")
    await worker.disconnect()
    await publisher.publish("queue/jobs", b"missed 3", qos=1)
    await publisher.disconnect()
    kept = stored_ids(redis_db, "queue/jobs")
    assert len(kept) == 4
    await bridge.stop()

    bridge = await make_bridge()
    worker, connack = await v5.connect(bridge, "w0", clean=clean_start)
    assert not connack.session_present
    await worker.subscribe("queue/#", 1)
    await bridge.idle()
    publisher, _ = await v5.connect(bridge, "pub")
    await nothing_more(worker, publisher, "queue/marker")
    assert bridge.metrics.rules["redis.session.subscribed.1"]["matched"] == 0
    assert stored_ids(redis_db, "queue/jobs") == kept

    # the same messages do go to a session with expiry > 0 subscribing now
    other, _ = await v5.connect(bridge, "w3600", expiry=PERSISTENT, clean=False)
    await other.subscribe("queue/jobs", 1)
    assert payloads(await other.expect(4)) == [f"missed {n}".encode() for n in range(4)]


# -- pubsub offsets --------------------------------------------------------------------------------


async def test_pubsub_offset_moves_with_the_acks_of_a_5_0_client(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients
) -> None:
    key = "mqtt:acked:r5:pubsub/#"
    bridge = await make_bridge()
    reader, _ = await v5.connect(bridge, "r5", expiry=PERSISTENT, clean=False)
    await reader.subscribe("pubsub/#", 1)
    await bridge.idle()
    assert redis_db.get(key) == b"0"  # a first subscription: before everything, nothing sent
    publisher, _ = await v5.connect(bridge, "pub")
    await publisher.publish("pubsub/a", b"live", qos=1)
    assert payloads(await reader.expect(1)) == [b"live"]
    live_id = stored_ids(redis_db, "pubsub/a")[0]
    await wait_until(lambda: redis_db.get(key) == live_id, what="the ack to move the offset")
    await reader.disconnect()
    for n in range(3):
        await publisher.publish("pubsub/a", f"missed {n}".encode(), qos=1)
    await publisher.disconnect()
    await bridge.stop()

    bridge = await make_bridge()
    reader, _ = await v5.connect(bridge, "r5", expiry=PERSISTENT, clean=False)
    await reader.subscribe("pubsub/#", 1)
    assert payloads(await reader.expect(3)) == [b"missed 0", b"missed 1", b"missed 2"]
    newest = stored_ids(redis_db, "pubsub/a")[-1]
    await wait_until(lambda: redis_db.get(key) == newest, what="the acks to move the offset to the newest")
    # the messages stay for other subscribers (one-to-many)
    assert len(stored_ids(redis_db, "pubsub/a")) == 4
    assert await reader.unsubscribe("pubsub/#") == [0]
    await wait_until(lambda: redis_db.exists(key) == 0, what="unsubscribe to drop the offset")


# -- proxy subscription ----------------------------------------------------------------------------


async def test_proxy_subscription_of_a_5_0_client(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients
) -> None:
    """`mqtt:sub:<clientid>` subscribes the client when it connects; for a session with expiry > 0
    the new subscription also fetches what Redis holds for it."""
    bridge = await make_bridge()
    publisher, _ = await v5.connect(bridge, "app")
    await publisher.publish("queue/px5/jobs", b"stored before", qos=1)
    redis_db.hset("mqtt:sub:px5", mapping={"px5/downlink": 1, "queue/px5/#": 2})
    device, connack = await v5.connect(bridge, "px5", expiry=PERSISTENT, clean=False)
    assert not connack.session_present
    assert [(m.topic, m.payload, m.qos) for m in await device.expect(1)] == [("queue/px5/jobs", b"stored before", 1)]
    await bridge.idle()
    await publisher.publish("px5/downlink", b"reboot", qos=1)
    await publisher.publish("queue/px5/jobs", b"live", qos=2)
    got = await device.expect(2)
    assert [(m.topic, m.payload, m.qos) for m in got] == [
        ("px5/downlink", b"reboot", 1),
        ("queue/px5/jobs", b"live", 2),
    ]
    # a proxy subscription carries no subscription identifier
    assert all("SubscriptionIdentifier" not in m.properties for m in got)
    await nothing_more(device, publisher, "px5/downlink")


# -- retain lookup ---------------------------------------------------------------------------------


async def publish_retained_then_restart(
    make_bridge: BridgeFactory, v5: V5Clients, redis_db: redis_sync.Redis
) -> Bridge:
    bridge = await make_bridge()
    publisher, _ = await v5.connect(bridge, "pub")
    await publisher.publish("status/lamp/1", b"on", qos=1, retain=True)
    await publisher.publish("status/lamp/2", b"off", qos=2, retain=True)
    await publisher.publish("status/door", b"shut", qos=1, retain=True)
    await publisher.disconnect()
    await wait_until(lambda: redis_db.zcard("mqtt:index:retain") == 3, what="three retained messages in Redis")
    await bridge.stop()  # the broker forgets its retained messages
    return await make_bridge()


async def test_retain_lookup_after_restart_for_a_5_0_subscriber(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients
) -> None:
    bridge = await publish_retained_then_restart(make_bridge, v5, redis_db)
    viewer, _ = await v5.connect(bridge, "viewer")
    assert await viewer.subscribe("status/lamp/+", 1, subscription_id=7) == [1]
    got = sorted(await viewer.expect(2), key=lambda m: m.topic)
    assert [(m.topic, m.payload, m.qos, m.retain) for m in got] == [
        ("status/lamp/1", b"on", 1, True),
        ("status/lamp/2", b"off", 1, True),
    ]
    await bridge.idle()
    publisher, _ = await v5.connect(bridge, "pub")
    await nothing_more(viewer, publisher, "status/lamp/marker")


async def test_retain_lookup_keeps_retain_handling_2(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients
) -> None:
    """Retain handling 2: no retained message at subscribe time, from the broker or from Redis."""
    bridge = await publish_retained_then_restart(make_bridge, v5, redis_db)
    viewer, _ = await v5.connect(bridge, "viewer")
    assert await viewer.subscribe("status/#", 1, retain_handling=2) == [1]
    await bridge.idle()
    publisher, _ = await v5.connect(bridge, "pub")
    await nothing_more(viewer, publisher, "status/marker")
    # retain handling 1 on a new subscription: sent
    assert await viewer.subscribe("status/door", 1, retain_handling=1) == [1]
    assert [(m.payload, m.retain) for m in await viewer.expect(1)] == [(b"shut", True)]


# -- paging ----------------------------------------------------------------------------------------


def shipped_rules(max_returned_count: int) -> str:
    """rules/redis.conf with a smaller page for the two fetches."""
    text = (ROOT / "rules" / "redis.conf").read_text()
    assert text.count('"max_returned_count": 500') == 2
    return text.replace('"max_returned_count": 500', f'"max_returned_count": {max_returned_count}')


@pytest.mark.parametrize("kind", ["queue", "pubsub"])
async def test_paged_fetch_for_a_5_0_session(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients, kind: str
) -> None:
    """12 messages, pages of 5: the next page goes out as the previous one is acked; all arrive, in order."""
    rules = shipped_rules(5)
    bridge = await make_bridge(rules)
    reader, _ = await v5.connect(bridge, "pg5", expiry=PERSISTENT, clean=False)
    await reader.subscribe(f"{kind}/#", 1)  # pubsub: the offset starts here
    await reader.disconnect()
    publisher, _ = await v5.connect(bridge, "pub")
    sent = [f"m{n:02}".encode() for n in range(12)]
    for n, payload in enumerate(sent):  # QoS 1: paho hands a QoS 2 message over only at PUBREL
        await publisher.publish(f"{kind}/t{n % 3}", payload, qos=1)
    await publisher.disconnect()
    await bridge.stop()

    bridge = await make_bridge(rules)
    reader, _ = await v5.connect(bridge, "pg5", expiry=PERSISTENT, clean=False)
    await reader.subscribe(f"{kind}/#", 1)
    assert payloads(await reader.expect(12)) == sent
    await bridge.idle()
    fetch_rule = "redis.session.subscribed.1" if kind == "queue" else "redis.session.subscribed.2"
    assert bridge.metrics.rules[fetch_rule]["succeeded"] == 3  # pages of 5, 5 and 2
    publisher, _ = await v5.connect(bridge, "pub")
    await nothing_more(reader, publisher, f"{kind}/marker")
    if kind == "queue":
        await wait_until(
            lambda: not any(stored_ids(redis_db, f"queue/t{n}") for n in range(3)), what="the acks to empty the queue"
        )


# -- message expiry --------------------------------------------------------------------------------


def expiring(seconds: int) -> Any:
    return props(PacketTypes.PUBLISH, MessageExpiryInterval=seconds)


async def test_an_expired_message_is_never_fetched(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients
) -> None:
    """Redis keeps the expired message (its hash lives `expired_time`); the broker that saw it
    published remembers its deadline and does not deliver it when a fetch finds it."""
    bridge = await make_bridge()
    publisher, _ = await v5.connect(bridge, "pub")
    await publisher.publish("queue/exp", b"short", qos=1, properties=expiring(1))
    await publisher.publish("queue/exp", b"long", qos=1, properties=expiring(600))
    await asyncio.sleep(1.5)  # the feature is time: past the 1 s expiry of "short"
    await publisher.publish("queue/exp", b"later", qos=1)
    assert len(stored_ids(redis_db, "queue/exp")) == 3

    worker, _ = await v5.connect(bridge, "w5", expiry=PERSISTENT, clean=False)
    await worker.subscribe("queue/#", 1)
    got = await worker.expect(2)
    assert payloads(got) == [b"long", b"later"]
    # what is left of the expiry interval goes with the fetched message; none for one without
    assert 0 < got[0].properties["MessageExpiryInterval"] <= 600
    assert "MessageExpiryInterval" not in got[1].properties
    await bridge.idle()
    await nothing_more(worker, publisher, "queue/marker")


async def test_an_expired_message_is_not_fetched_after_a_restart(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients
) -> None:
    bridge = await make_bridge()
    publisher, _ = await v5.connect(bridge, "pub")
    await publisher.publish("queue/exp", b"short", qos=1, properties=expiring(1))
    await publisher.publish("queue/exp", b"later", qos=1)
    await publisher.disconnect()
    await bridge.stop()
    await asyncio.sleep(1.5)  # the feature is time: past the 1 s expiry of "short"

    bridge = await make_bridge()
    worker, _ = await v5.connect(bridge, "w5", expiry=PERSISTENT, clean=False)
    await worker.subscribe("queue/#", 1)
    assert payloads(await worker.expect(1)) == [b"later"]


async def test_an_expired_message_in_the_offline_queue_is_never_delivered(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients
) -> None:
    bridge = await make_bridge()
    worker, _ = await v5.connect(bridge, "w5", expiry=PERSISTENT, clean=False)
    await worker.subscribe("queue/#", 1)
    await worker.subscribe("notes/#", 1)  # not stored in Redis by a fetch rule: the broker's queue only
    await worker.disconnect()
    publisher, _ = await v5.connect(bridge, "pub")
    for topic in ("queue/exp", "notes/exp"):
        await publisher.publish(topic, b"short", qos=1, properties=expiring(1))
        await publisher.publish(topic, b"long", qos=1, properties=expiring(600))
    await asyncio.sleep(1.5)  # the feature is time: past the 1 s expiry of "short"
    await publisher.publish("queue/exp", b"later", qos=1)

    worker, connack = await v5.connect(bridge, "w5", expiry=PERSISTENT, clean=False)
    assert connack.session_present
    got = await worker.expect(3)
    assert [(m.topic, m.payload) for m in got] == [
        ("queue/exp", b"long"),
        ("notes/exp", b"long"),
        ("queue/exp", b"later"),
    ]
    assert all(0 < m.properties["MessageExpiryInterval"] <= 600 for m in got[:2])
    await bridge.idle()
    await nothing_more(worker, publisher, "queue/marker")


# -- what the bridge sends carries the subscription identifier --------------------------------------


async def test_fetched_and_looked_up_messages_carry_the_subscription_identifier(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients
) -> None:
    """A 5.0 client that dispatches by subscription identifier (3.3.4) finds what the bridge
    sends from Redis under the subscription it made, like what the broker routes live."""
    bridge = await make_bridge()
    worker, _ = await v5.connect(bridge, "w5", expiry=PERSISTENT, clean=False)
    await worker.subscribe("queue/#", 1)
    await worker.disconnect()
    publisher, _ = await v5.connect(bridge, "pub")
    await publisher.publish("queue/jobs", b"missed", qos=1)
    await publisher.publish("status/lamp", b"on", qos=1, retain=True)
    await publisher.disconnect()
    await wait_until(lambda: redis_db.exists("mqtt:retain:status/lamp") == 1, what="the retained message in Redis")
    await bridge.stop()

    bridge = await make_bridge()
    worker, _ = await v5.connect(bridge, "w5", expiry=PERSISTENT, clean=False)
    await worker.subscribe("queue/#", 1, subscription_id=11)
    fetched = await worker.expect(1)
    await worker.subscribe("status/+", 1, subscription_id=12)
    looked_up = await worker.expect(1)
    publisher, _ = await v5.connect(bridge, "pub")
    await publisher.publish("queue/jobs", b"live", qos=1)
    live = await worker.expect(1)
    assert [(m.payload, m.properties.get("SubscriptionIdentifier")) for m in fetched + looked_up + live] == [
        (b"missed", [11]),
        (b"on", [12]),
        (b"live", [11]),
    ]


# -- a refused PUBACK is not an ack -------------------------------------------------------------------


async def test_a_puback_with_an_error_reason_does_not_delete_a_queued_message(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients, raw_connect: Any
) -> None:
    """5.0 PUBACK reason >= 0x80: the subscriber did not accept the message (3.4.2.1), so it is not
    acked for the queue (deleted for everyone) and stays stored, as for a refused PUBREC."""
    bridge = await make_bridge()
    worker, connack = await raw_connect(
        mqtt_port(bridge), "w5", clean_session=False, level=MQTT_5, properties=Properties(session_expiry_interval=60)
    )
    assert connack.reason_code == 0
    assert (await worker.subscribe(1, ("queue/#", 1))).reason_codes == [1]
    publisher, _ = await v5.connect(bridge, "pub")
    await publisher.publish("queue/jobs", b"refused", qos=1)
    await publisher.publish("queue/jobs", b"accepted", qos=1)
    refused, accepted = await worker.recv(), await worker.recv()
    assert (refused.payload, accepted.payload) == (b"refused", b"accepted")
    await worker.send(Puback(refused.packet_id, 0x80))
    await worker.send(Puback(accepted.packet_id))
    await wait_until(lambda: len(stored_ids(redis_db, "queue/jobs")) == 1, what="the accepted message to be deleted")
    await bridge.idle()
    [left] = stored_ids(redis_db, "queue/jobs")
    assert redis_db.hget(b"mqtt:msg:" + left, "payload") == b"refused"


# -- a session that expired in the broker -------------------------------------------------------------


async def test_a_session_expired_in_the_broker_gets_its_queue_from_redis(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients
) -> None:
    """Session expiry 1 s: the broker drops the session and its queue; a new subscription of the
    client fetches from Redis what it had queued and what came after, once each."""
    bridge = await make_bridge()
    worker, _ = await v5.connect(bridge, "w1", expiry=1, clean=False)
    await worker.subscribe("queue/#", 1)
    await worker.disconnect()
    publisher, _ = await v5.connect(bridge, "pub")
    await publisher.publish("queue/jobs", b"queued in the session", qos=1)
    await asyncio.sleep(1.5)  # the feature is time: past the 1 s session expiry
    await publisher.publish("queue/jobs", b"after it expired", qos=1)

    worker, connack = await v5.connect(bridge, "w1", expiry=1, clean=False)
    assert not connack.session_present
    await worker.subscribe("queue/#", 1)
    assert payloads(await worker.expect(2)) == [b"queued in the session", b"after it expired"]
    await bridge.idle()
    await nothing_more(worker, publisher, "queue/marker")


# -- topic aliases -------------------------------------------------------------------------------------


async def test_a_message_published_through_a_topic_alias_is_stored_under_its_topic(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, v5: V5Clients
) -> None:
    """The stored layout knows no aliases: a PUBLISH that names its topic only by alias is stored,
    retained and fetched under the topic the alias stands for."""
    bridge = await make_bridge()
    publisher, _ = await v5.connect(bridge, "pub")
    alias = props(PacketTypes.PUBLISH, TopicAlias=3)
    await publisher.publish("queue/aliased", b"first", qos=1, properties=alias)
    await publisher.publish("", b"second", qos=1, properties=alias)
    await publisher.publish("", b"kept", qos=1, retain=True, properties=alias)
    await bridge.idle()
    ids = stored_ids(redis_db, "queue/aliased")
    assert [redis_db.hget(b"mqtt:msg:" + i, "payload") for i in ids] == [b"first", b"second", b"kept"]
    assert {redis_db.hget(b"mqtt:msg:" + i, "topic") for i in ids} == {b"queue/aliased"}
    assert redis_db.zrange("mqtt:retain:queue/aliased", 0, -1) == [ids[-1]]
    assert redis_db.zrangebylex("mqtt:index:msg", "-", "+") == [b"queue/aliased"]

    worker, _ = await v5.connect(bridge, "w5", expiry=PERSISTENT, clean=False)
    await worker.subscribe("queue/+", 1, retain_handling=2)
    got = await worker.expect(3)
    assert [(m.topic, m.payload) for m in got] == [("queue/aliased", p) for p in (b"first", b"second", b"kept")]
