"""Ordering, paging, exactness and idempotency of the Redis backend, through the embedded broker."""

from __future__ import annotations

import time

import redis as redis_sync

from bridge.events import MessageAcked, MessagePublish
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client, wait_until

FETCH_RULES = """
backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}}
backend.redis.hook.session.subscribed.1 = {"topic": "queue/#", "action": {"function": "on_message_fetch_for_queue"}, "offline_opts": {"max_returned_count": 100}}
backend.redis.hook.session.subscribed.2 = {"topic": "pubsub/#", "action": {"function": "on_message_fetch_for_pubsub"}, "offline_opts": {"max_returned_count": 7}}
backend.redis.hook.message.acked.1 = {"topic": "queue/#", "action": {"function": "on_message_acked_for_queue"}}
backend.redis.hook.message.acked.2 = {"topic": "pubsub/#", "action": {"function": "on_message_acked_for_pubsub"}}
"""


async def test_thousand_messages_in_publish_order_paged(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    bridge = await make_bridge(FETCH_RULES)
    publisher = await Client("pub", mqtt_port(bridge)).connect()
    payloads = [f"m{n:04d}".encode() for n in range(1000)]
    await publisher.publish_many([("queue/seq", p) for p in payloads], qos=1)
    await publisher.disconnect()
    await bridge.idle()
    ids = redis_db.zrange("mqtt:msg:queue/seq", 0, -1)
    assert [redis_db.hget(b"mqtt:msg:" + i, "payload") for i in ids] == payloads

    # a new persistent subscriber gets the whole backlog, oldest first, 100 at a time as it acks
    subscriber = await Client("s", mqtt_port(bridge), clean=False).connect()
    await subscriber.subscribe("queue/seq", qos=1)
    got = await subscriber.expect(1000, timeout=60)
    assert [m.payload for m in got] == payloads
    await wait_until(lambda: redis_db.zcard("mqtt:msg:queue/seq") == 0, what="every ack applied")
    await subscriber.expect_nothing()
    await subscriber.disconnect()


async def test_wildcard_fetch_merges_topics_in_publish_order(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    bridge = await make_bridge(FETCH_RULES)
    subscriber = await Client("s", mqtt_port(bridge), clean=False).connect()
    await subscriber.subscribe("pubsub/+/temp", qos=1)  # first subscription: offset recorded
    await bridge.idle()
    await subscriber.disconnect()
    await bridge.stop()  # the broker forgets the session; Redis remembers the offset

    bridge = await make_bridge(FETCH_RULES)
    publishers = [await Client(f"dev{n}", mqtt_port(bridge)).connect() for n in range(3)]
    expected = []
    for round_ in range(10):
        for n, publisher in enumerate(publishers):
            payload = f"dev{n} r{round_}".encode()
            await publisher.publish(f"pubsub/dev{n}/temp", payload, qos=1)
            expected.append(payload)
    await publishers[0].publish("pubsub/dev0/humidity", b"not matched", qos=1)
    await bridge.idle()

    subscriber = await Client("s", mqtt_port(bridge), clean=False).connect()
    await subscriber.subscribe("pubsub/+/temp", qos=1)
    got = await subscriber.expect(30)  # pages of 7, continued as acks arrive
    assert [m.payload for m in got] == expected
    await subscriber.expect_nothing()
    await bridge.idle()
    newest = max(redis_db.zrange(f"mqtt:msg:pubsub/dev{n}/temp", -1, -1)[0] for n in range(3))
    assert redis_db.get("mqtt:acked:s:pubsub/+/temp") == newest
    for client in (*publishers, subscriber):
        await client.disconnect()


async def test_fetched_messages_reach_only_their_subscriber(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    bridge = await make_bridge(FETCH_RULES)
    newcomer = await Client("newcomer", mqtt_port(bridge), clean=False).connect()
    await newcomer.subscribe("pubsub/x", qos=1)  # records its offset: before everything
    await newcomer.disconnect()
    await bridge.stop()  # the broker forgets newcomer's session; Redis keeps its offset

    bridge = await make_bridge(FETCH_RULES)
    bystander = await Client("bystander", mqtt_port(bridge), clean=False).connect()
    await bystander.subscribe("pubsub/x", qos=1)
    publisher = await Client("pub", mqtt_port(bridge)).connect()
    await publisher.publish("pubsub/x", b"stored", qos=1)
    assert [m.payload for m in await bystander.expect(1)] == [b"stored"]
    await bridge.idle()

    newcomer = await Client("newcomer", mqtt_port(bridge), clean=False).connect()
    await newcomer.subscribe("pubsub/x", qos=1)  # fetched from Redis for newcomer alone
    assert [m.payload for m in await newcomer.expect(1)] == [b"stored"]
    await bystander.expect_nothing(0.5)
    for client in (bystander, publisher, newcomer):
        await client.disconnect()


def _publish_event(msgid: str, payload: bytes) -> MessagePublish:
    return MessagePublish(
        msgid=msgid,
        clientid="c",
        username=None,
        topic="t/1",
        qos=1,
        payload=payload,
        retain=False,
        node="n",
        peername="127.0.0.1:1",
        timestamp=time.time(),
    )


async def test_replays_are_idempotent_and_offsets_never_go_back(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    bridge = await make_bridge(
        FETCH_RULES
        + """
backend.redis.hook.message.publish.2 = {"topic": "#", "action": {"function": "on_message_store"}}
backend.redis.hook.message.acked.3 = {"topic": "t/#", "action": {"function": "on_message_acked_for_pubsub"}}
"""
    )
    first, second = bridge.msgids.next(), bridge.msgids.next()
    for _ in range(3):  # publish + store rules, each event three times
        await bridge.dispatcher(_publish_event(first, b"one"))
        await bridge.dispatcher(_publish_event(second, b"two"))
    await bridge.idle()
    assert redis_db.zrange("mqtt:msg:t/1", 0, -1) == [first.encode(), second.encode()]
    assert redis_db.hget(f"mqtt:msg:{first}", "payload") == b"one"
    assert len(redis_db.keys("mqtt:msg:*")) == 3

    redis_db.set("mqtt:acked:sub:t/1", "0")
    for msgid in (second, first):  # the newer ack arrives first; the older must not move it back
        await bridge.dispatcher(
            MessageAcked(
                msgid=msgid,
                clientid="sub",
                username=None,
                from_clientid="c",
                topic="t/1",
                qos=1,
                payload=b"",
                retain=False,
                node="n",
                timestamp=time.time(),
                filters=("t/1",),
            )
        )
    await bridge.idle()
    assert redis_db.get("mqtt:acked:sub:t/1") == second.encode()
    # an ack where no pubsub fetch created an offset creates none
    assert redis_db.exists("mqtt:acked:sub:t/#") == 0
