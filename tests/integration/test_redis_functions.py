"""The remaining Redis functions: wildcard retain lookup, expiry trimming, event log, bad proxy entries."""

from __future__ import annotations

import redis as redis_sync

from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client, wait_until


async def test_wildcard_retain_lookup_after_restart(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    bridge = await make_bridge()
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    await publisher.publish("status/lamp/1", b"on", qos=1, retain=True)
    await publisher.publish("status/lamp/2", b"off", qos=0, retain=True)
    await publisher.publish("status/door", b"shut", qos=1, retain=True)
    await publisher.publish("other/x", b"no", qos=1, retain=True)
    await publisher.disconnect()
    await bridge.stop()  # the broker forgets its retained messages

    bridge = await make_bridge()
    client = await Client(mqtt_port(bridge), "viewer").connected()
    await client.subscribe("status/lamp/+", qos=1)
    got = sorted(await client.expect(2), key=lambda m: m.topic)
    assert [(m.topic, m.payload, m.qos, m.retain) for m in got] == [
        ("status/lamp/1", b"on", 1, True),
        ("status/lamp/2", b"off", 0, True),
    ]
    await client.expect_nothing()
    # while the broker holds the retained message itself, Redis does not send a second copy
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    await publisher.publish("status/door", b"open", qos=1, retain=True)
    await bridge.idle()
    await client.subscribe("status/door", qos=1)
    assert [(m.payload, m.retain) for m in await client.expect(1)] == [(b"open", True)]
    await client.expect_nothing()
    for c in (client, publisher):
        await c.disconnect()


EXPIRY_RULES = """
backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, "expired_time": 3600}
backend.redis.hook.session.subscribed.1 = {"topic": "queue/#", "action": {"function": "on_message_fetch_for_queue"}}
"""


async def test_expired_messages_are_trimmed_lazily_and_periodically(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    """`expired_time` is the message hash's TTL; when Redis drops a hash, its list entry goes too.

    Redis's own expiry is not waited for (a wait that must outlast a TTL yet end before the next
    one passes only on a machine's timing): the TTL is read back, then the hashes are removed as
    Redis removes them when it runs out."""
    bridge = await make_bridge(EXPIRY_RULES, extra_config="backend.redis.pool1.trim_interval = 500ms\n")
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    await publisher.publish("queue/old", b"old", qos=1)
    await publisher.publish("other/old", b"old", qos=1)
    await bridge.idle()
    old_ids = [*redis_db.zrange("mqtt:msg:queue/old", 0, -1), *redis_db.zrange("mqtt:msg:other/old", 0, -1)]
    assert len(old_ids) == 2
    hashes = [b"mqtt:msg:" + msgid for msgid in old_ids]
    assert all(3500 < redis_db.ttl(key) <= 3600 for key in hashes)
    assert redis_db.delete(*hashes) == 2  # what Redis does when the TTL runs out
    await publisher.publish("queue/old", b"fresh", qos=1)
    await bridge.idle()
    subscriber = await Client(mqtt_port(bridge), "s", clean=False).connected()
    await subscriber.subscribe("queue/old", qos=1)
    assert [m.payload for m in await subscriber.expect(1)] == [b"fresh"]
    await subscriber.expect_nothing()
    assert old_ids[0] not in redis_db.zrange("mqtt:msg:queue/old", 0, -1)  # the lazy trim
    await wait_until(lambda: redis_db.zcard("mqtt:msg:other/old") == 0, timeout=10, what="periodic trim")
    for c in (publisher, subscriber):
        await c.disconnect()


async def test_event_log_stream(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    rules = "\n".join(
        f'backend.redis.hook.{hook}.1 = {{"action": {{"function": "on_event_log"}}}}'
        for hook in ("client.connected", "client.disconnected", "session.subscribed", "message.publish")
    )
    bridge = await make_bridge(rules + "\n")
    client = await Client(mqtt_port(bridge), "logger", username="alice").connected()
    await client.subscribe("a/b", qos=1)
    await client.publish("a/b", b"12345", qos=1)
    await client.expect(1)
    await client.disconnect()
    await wait_until(lambda: redis_db.xlen("mqtt:event_log") == 4, what="four event log entries")
    entries = [fields for _, fields in redis_db.xrange("mqtt:event_log")]
    assert [e[b"event"] for e in entries] == [
        b"client.connected",
        b"session.subscribed",
        b"message.publish",
        b"client.disconnected",
    ]
    assert entries[0][b"username"] == b"alice" and entries[0][b"clientid"] == b"logger"
    assert entries[2][b"topic"] == b"a/b" and entries[2][b"bytes"] == b"5" and len(entries[2][b"msgid"]) == 32
    assert entries[3][b"reason"] == b"normal"


async def test_bad_proxy_entries_are_skipped_and_counted(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    bridge = await make_bridge(
        'backend.redis.hook.client.connected.1 = {"action": {"function": "on_subscribe_lookup"}}\n'
    )
    redis_db.hset("mqtt:sub:dev", mapping={"good/topic": 1, "bad/#/topic": 1, "bad/qos": 7})
    device = await Client(mqtt_port(bridge), "dev").connected()
    await bridge.idle()
    assert bridge.metrics.rules["redis.client.connected.1"]["failed"] == 1
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    await publisher.publish("good/topic", b"hello", qos=1)
    assert [m.payload for m in await device.expect(1)] == [b"hello"]
    for c in (device, publisher):
        await c.disconnect()


async def test_shipped_template(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    rule = (
        'backend.redis.hook.message.publish.1 = {"topic": "sensors/#", "action": {"template": "redis/last_value.j2"}}\n'
    )
    bridge = await make_bridge(rule)
    device = await Client(mqtt_port(bridge), "d1").connected()
    await device.publish("sensors/temp", b'{"level": 1, "t": 20}', qos=1)
    await device.publish("sensors/temp", b'{"level": 4, "t": 90}', qos=1)
    await device.publish("sensors/raw", b"\xff not json", qos=0)
    await device.disconnect()
    await wait_until(lambda: redis_db.hget("last:d1", "sensors/raw") is not None, what="the QoS 0 message")
    assert redis_db.hget("last:d1", "sensors/temp") == b'{"level": 4, "t": 90}'
    assert redis_db.hget("last:d1", "sensors/raw") == b"\xff not json"
    assert redis_db.lrange("alarms:d1", 0, -1) == [b'{"level": 4, "t": 90}']


async def test_commands_pipeline_or_one_by_one(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    """In the pipeline every command is sent; one by one stops at the first error Redis returns."""
    commands = '["SET seen:${clientid} 1", "INCR text:${clientid}", "SET after:${clientid} 1"]'
    bridge = await make_bridge(
        f'backend.redis.hook.client.connected.1 = {{"action": {{"commands": {commands}}}}}\n'
        f'backend.redis.hook.client.connected.2 = {{"action": {{"commands": {commands.replace("after", "after2")}, '
        '"pipeline": false}}\n'
    )
    redis_db.set("text:c1", "not a number")
    client = await Client(mqtt_port(bridge), "c1").connected()
    await bridge.idle()
    assert redis_db.get("after:c1") == b"1"  # pipelined: the failing INCR did not stop it
    assert redis_db.exists("after2:c1") == 0  # one by one: stopped at the INCR
    counts = bridge.metrics.rules
    assert (counts["redis.client.connected.1"]["failed"], counts["redis.client.connected.2"]["failed"]) == (1, 1)
    await client.disconnect()


STORE_RULES = """
backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, "expired_time": 3600}
"""


async def test_retained_and_plain_messages_are_stored_with_the_same_layout(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    """A message that is not retained is stored with plain commands, a retained one by the store
    script (it must not expire a hash a retain rule keeps): both give the seed-003 layout."""
    bridge = await make_bridge(STORE_RULES)
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    await publisher.publish("lay/plain", b"p\x00\xff", qos=1)
    await publisher.publish("lay/kept", b"k", qos=1, retain=True)
    await bridge.idle()
    stored = {}
    for topic in ("lay/plain", "lay/kept"):
        (msgid,) = redis_db.zrange(f"mqtt:msg:{topic}", 0, -1)
        key = b"mqtt:msg:" + msgid
        stored[topic] = redis_db.hgetall(key)
        assert 3500 < redis_db.ttl(key) <= 3600
        assert redis_db.zscore("mqtt:index:msg", topic) == 0
        assert stored[topic][b"id"] == msgid
    assert list(stored["lay/plain"]) == list(stored["lay/kept"])  # same fields, same order
    assert stored["lay/plain"][b"payload"] == b"p\x00\xff" and stored["lay/plain"][b"retain"] == b"false"
    assert stored["lay/kept"][b"retain"] == b"true" and stored["lay/kept"][b"topic"] == b"lay/kept"
    await publisher.disconnect()
