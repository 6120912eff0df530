"""The Redis walkthrough of seed 003, end to end: real MQTT clients, the embedded broker, real Redis."""

from __future__ import annotations

import time

import redis as redis_sync

from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client, ConnAck, wait_until

NODE = "test@127.0.0.1"


async def test_online_status(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    bridge = await make_bridge()
    before = int(time.time())
    client = await Client(mqtt_port(bridge), "sub_client", clean=False).connected()
    await bridge.idle()
    stored = redis_db.hgetall("mqtt:client:sub_client")
    assert stored.keys() == {b"state", b"online_at", b"offline_at", b"node"}
    assert stored[b"state"] == b"1"
    assert stored[b"offline_at"] == b"undefined"
    assert stored[b"node"] == NODE.encode()
    assert before <= int(stored[b"online_at"]) <= int(time.time())
    assert redis_db.type(f"mqtt:node:{NODE}") == b"hash"
    assert redis_db.hget(f"mqtt:node:{NODE}", "sub_client") == stored[b"online_at"]

    await client.disconnect()
    await bridge.idle()
    stored = redis_db.hgetall("mqtt:client:sub_client")
    assert stored[b"state"] == b"0"
    assert before <= int(stored[b"offline_at"]) <= int(time.time())
    assert redis_db.hget(f"mqtt:node:{NODE}", "sub_client") is None

    # a reconnect keeps the last offline_at (it is `undefined` only before the first disconnect)
    client = await Client(mqtt_port(bridge), "sub_client", clean=False).connected()
    await bridge.idle()
    assert redis_db.hget("mqtt:client:sub_client", "state") == b"1"
    assert redis_db.hget("mqtt:client:sub_client", "offline_at") == stored[b"offline_at"]
    await client.disconnect()


async def test_proxy_subscription(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    bridge = await make_bridge()
    redis_db.hset("mqtt:sub:sub_client", "sub_client/upstream", 1)
    redis_db.hset("mqtt:sub:sub_client", "sub_client/downlink", 1)
    client = await Client(mqtt_port(bridge), "sub_client").connected()
    await bridge.idle()
    publisher = await Client(mqtt_port(bridge), "app").connected()
    await publisher.publish("sub_client/downlink", b"reboot", qos=1)
    await publisher.publish("sub_client/upstream", b"up", qos=1)
    got = await client.expect(2)
    assert [(m.topic, m.payload, m.qos) for m in got] == [
        ("sub_client/downlink", b"reboot", 1),
        ("sub_client/upstream", b"up", 1),
    ]
    await publisher.publish("other/topic", b"x", qos=1)
    await client.expect_nothing()
    await client.disconnect()
    await publisher.disconnect()


async def test_message_list_and_details(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    bridge = await make_bridge()
    client = await Client(mqtt_port(bridge), "sub_client").connected()
    before = int(time.time())
    await client.publish("up/upstream_topic", b'{ "cmd": "reboot" }', qos=2)
    await client.publish("up/upstream_topic", b"second", qos=1)
    await client.publish("up/upstream_topic", b"qos0 is not stored", qos=0)
    await client.publish("up/upstream_topic", b"third", qos=1)
    await client.disconnect()
    await bridge.idle()

    assert redis_db.type("mqtt:msg:up/upstream_topic") == b"zset"
    members = redis_db.zrange("mqtt:msg:up/upstream_topic", 0, -1, withscores=True)
    assert len(members) == 3
    ids = [m.decode() for m, _ in members]
    assert ids == sorted(ids)  # lexical order is time order
    assert all(len(i) == 32 and i == i.upper() for i in ids)
    assert [int(s) for _, s in members] == sorted(int(s) for _, s in members)

    details = [redis_db.hgetall(f"mqtt:msg:{i}") for i in ids]
    assert details[0].keys() == {b"id", b"from", b"qos", b"topic", b"payload", b"ts", b"retain"}
    assert [(d[b"id"].decode(), d[b"from"], d[b"qos"], d[b"topic"], d[b"payload"], d[b"retain"]) for d in details] == [
        (ids[0], b"sub_client", b"2", b"up/upstream_topic", b'{ "cmd": "reboot" }', b"false"),
        (ids[1], b"sub_client", b"1", b"up/upstream_topic", b"second", b"false"),
        (ids[2], b"sub_client", b"1", b"up/upstream_topic", b"third", b"false"),
    ]
    assert all(before <= int(d[b"ts"]) <= int(time.time()) for d in details)
    # expired_time 86400 in rules/redis.conf
    assert 86000 < redis_db.ttl(f"mqtt:msg:{ids[0]}") <= 86400


async def test_retained_message_set_replace_clear(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    bridge = await make_bridge()
    client = await Client(mqtt_port(bridge), "pub").connected()
    await client.publish("status/lamp", b"on", qos=1, retain=True)
    await bridge.idle()
    first = redis_db.zrange("mqtt:retain:status/lamp", 0, -1)
    assert len(first) == 1
    held = redis_db.hgetall(b"mqtt:msg:" + first[0])
    assert held[b"payload"] == b"on"
    assert held[b"retain"] == b"true"
    assert redis_db.ttl(b"mqtt:msg:" + first[0]) == -1  # no expiry while retained

    await client.publish("status/lamp", b"off", qos=1, retain=True)
    await bridge.idle()
    second = redis_db.zrange("mqtt:retain:status/lamp", 0, -1)
    assert len(second) == 1
    assert second != first
    assert redis_db.hget(b"mqtt:msg:" + second[0], "payload") == b"off"
    assert redis_db.ttl(b"mqtt:msg:" + second[0]) == -1
    assert 0 < redis_db.ttl(b"mqtt:msg:" + first[0]) <= 86400  # the replaced one expires like any message

    await client.publish("status/lamp", b"", qos=1, retain=True)
    await bridge.idle()
    assert redis_db.exists("mqtt:retain:status/lamp") == 0
    await client.disconnect()


async def test_offline_queue_and_pubsub_through_the_broker(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    bridge = await make_bridge()
    port = mqtt_port(bridge)
    queue_sub = await Client(port, "q1", clean=False).connected()
    await queue_sub.subscribe("queue/#", qos=1)
    pubsub_sub = await Client(port, "p1", clean=False).connected()
    await pubsub_sub.subscribe("pubsub/#", qos=1)
    await bridge.idle()
    assert redis_db.get("mqtt:acked:p1:pubsub/#") == b"0"  # first subscription: before everything
    await queue_sub.disconnect()
    await pubsub_sub.disconnect()

    publisher = await Client(port, "pub").connected()
    for n in range(5):
        await publisher.publish("queue/a", f"q{n}".encode(), qos=1)
        await publisher.publish("pubsub/a", f"p{n}".encode(), qos=1)
    await bridge.idle()
    assert redis_db.zcard("mqtt:msg:queue/a") == 5

    queue_sub = await Client(port, "q1", clean=False).connected()
    assert queue_sub.connack == ConnAck(reason=0, session_present=True, properties={})
    got = await queue_sub.expect(5)
    assert [m.payload for m in got] == [f"q{n}".encode() for n in range(5)]
    pubsub_sub = await Client(port, "p1", clean=False).connected()
    got = await pubsub_sub.expect(5)
    assert [m.payload for m in got] == [f"p{n}".encode() for n in range(5)]

    # queue: acks deleted every message for everyone; pubsub: the offset is the newest acked id
    # (the acks are on their way from the clients: wait on what Redis holds)
    await wait_until(lambda: redis_db.zcard("mqtt:msg:queue/a") == 0, what="queue acks")
    assert redis_db.zcard("mqtt:msg:pubsub/a") == 5
    newest = redis_db.zrange("mqtt:msg:pubsub/a", -1, -1)[0]
    await wait_until(lambda: redis_db.get("mqtt:acked:p1:pubsub/#") == newest, what="pubsub offset")

    # unsubscribe drops the offset (the shipped commands rule)
    await pubsub_sub.unsubscribe("pubsub/#")
    await bridge.idle()
    assert redis_db.exists("mqtt:acked:p1:pubsub/#") == 0
    for client in (queue_sub, pubsub_sub, publisher):
        await client.disconnect()


async def test_offline_messages_survive_a_bridge_restart(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    """The embedded broker keeps sessions in memory; after a restart Redis delivers what was missed."""
    bridge = await make_bridge()
    port = mqtt_port(bridge)
    sub = await Client(port, "p2", clean=False).connected()
    await sub.subscribe("pubsub/#", qos=1)
    publisher = await Client(port, "pub").connected()
    await publisher.publish("pubsub/t", b"seen live", qos=1)
    assert [m.payload for m in await sub.expect(1)] == [b"seen live"]
    await wait_until(lambda: redis_db.get("mqtt:acked:p2:pubsub/#") not in (None, b"0"), what="live ack")
    await sub.disconnect()
    for n in range(4):
        await publisher.publish("pubsub/t", f"missed {n}".encode(), qos=1)
    await publisher.disconnect()
    await bridge.stop()

    bridge = await make_bridge()  # same Redis, empty broker
    sub = await Client(mqtt_port(bridge), "p2", clean=False).connected()
    assert sub.connack == ConnAck(reason=0, session_present=False, properties={})
    await sub.subscribe("pubsub/#", qos=1)
    got = await sub.expect(4)
    assert [m.payload for m in got] == [f"missed {n}".encode() for n in range(4)]
    assert all(not m.retain for m in got)
    newest = redis_db.zrange("mqtt:msg:pubsub/t", -1, -1)[0]
    await wait_until(lambda: redis_db.get("mqtt:acked:p2:pubsub/#") == newest, what="offset at the newest")
    await sub.expect_nothing()
    await sub.disconnect()


async def test_queue_fetch_after_restart_and_retain_lookup(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    bridge = await make_bridge()
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    await publisher.publish("queue/jobs", b"job 1", qos=1)
    await publisher.publish("queue/jobs", b"job 2", qos=2)  # delivered at the subscription's QoS 1
    await publisher.publish("queue/cfg", b"retained cfg", qos=1, retain=True)
    await publisher.disconnect()
    await bridge.stop()

    bridge = await make_bridge()
    worker = await Client(mqtt_port(bridge), "w1", clean=False).connected()
    await worker.subscribe("queue/#", qos=1)
    got = await worker.expect(3)
    # the queue fetch sends the stored messages in publish order; the retained copy of queue/cfg is
    # the same message, so the retain lookup does not send it a second time
    assert [(m.topic, m.payload, m.qos) for m in got] == [
        ("queue/jobs", b"job 1", 1),
        ("queue/jobs", b"job 2", 1),
        ("queue/cfg", b"retained cfg", 1),
    ]
    await worker.expect_nothing()
    await wait_until(lambda: redis_db.zcard("mqtt:msg:queue/jobs") == 0, what="acks delete for everyone")
    assert redis_db.zcard("mqtt:retain:queue/cfg") == 1  # the retained message stays
    await worker.disconnect()
