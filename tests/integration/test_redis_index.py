"""The Redis topic index: wildcard fetch and retain lookup cost what the matching topics cost.

Command costs are counted with INFO commandstats on a Redis of this module's own (port 6393),
so no other client's commands are in the counts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis as redis_sync
import redis.asyncio as aioredis

from actions.redis import functions, keys, scripts
from actions.redis.index import MSG, RETAIN, TopicIndex
from actions.redis.packing import pipeline
from actions.redis.resp import Packed
from bridge.backend import Job
from bridge.events import MessageAcked, MessagePublish
from bridge.msgid import MsgIdGenerator
from bridge.topics import matches
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client, wait_until
from support.services import start_redis, stop_redis

COUNT_PORT = 6393
UNRELATED = 100_000
IDS = MsgIdGenerator("older-writer")

FETCH_RULES = """
backend.redis.hook.session.subscribed.1 = {"topic": "#", "action": {"function": "on_message_fetch_for_queue"}, "offline_opts": {"max_returned_count": 1000}}
backend.redis.hook.session.subscribed.2 = {"topic": "#", "action": {"function": "on_retain_lookup"}}
"""


@pytest.fixture(scope="module")
def count_port() -> Iterator[int]:
    start_redis(COUNT_PORT)
    yield COUNT_PORT
    stop_redis(COUNT_PORT)


@pytest.fixture
def count_db(count_port: int) -> Iterator[redis_sync.Redis]:
    client = redis_sync.Redis(port=count_port, protocol=2)
    client.flushall()
    yield client
    client.close()


def write_without_index(db: redis_sync.Redis, topic: str, payload: bytes, retain: bool = False) -> str:
    """Store a message in the seed-003 layout as a writer that keeps no index did (EMQX, older hookbridge)."""
    msgid = IDS.next()
    retained = "true" if retain else "false"
    fields = {
        "id": msgid,
        "from": "old",
        "qos": 1,
        "topic": keys.enc(topic),
        "payload": payload,
        "ts": 1,
        "retain": retained,
    }
    pipe = db.pipeline(transaction=False)
    pipe.hset(b"mqtt:msg:" + msgid.encode(), mapping=fields)  # type: ignore[arg-type]
    pipe.zadd(keys.retain(topic) if retain else keys.topic_list(topic), {msgid: keys.score(msgid)})
    pipe.execute()
    return msgid


def add_unrelated_keys(db: redis_sync.Redis, count: int) -> None:
    for start in range(0, count, 10_000):
        db.mset({f"app:{i}": i for i in range(start, min(start + 10_000, count))})


def command_calls(db: redis_sync.Redis) -> dict[str, int]:
    stats: dict[str, Any] = db.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}
    for ours in ("info", "config|resetstat", "config"):  # the test's own
        calls.pop(ours, None)
    return calls


def index_of(db: redis_sync.Redis, key: bytes) -> set[str]:
    return {keys.dec(member) for member in db.zrange(key, 0, -1)}


async def test_wildcard_subscribe_costs_the_matching_topics_not_the_keyspace(
    make_bridge: BridgeFactory, count_db: redis_sync.Redis
) -> None:
    add_unrelated_keys(count_db, UNRELATED)
    stored = [f"a/{i}/c" for i in (1, 2, 3)] * 2 + [f"b/{i}/c" for i in range(200)] + ["$SYS/x"]
    for index, topic in enumerate(stored):
        write_without_index(count_db, topic, f"m{index}".encode())
    retained = ["a/1/c", "a/2/x", "b/7/c", "$SYS/r"]
    for topic in retained:
        write_without_index(count_db, topic, b"kept", retain=True)

    # The data predates the index: the bridge builds it once, at start.
    bridge = await make_bridge(FETCH_RULES, port=COUNT_PORT)
    backend: Any = bridge.runners["redis.pool1"].backend
    await wait_until(lambda: backend.index.ready, timeout=30, what="the topic index built")
    assert index_of(count_db, keys.MSG_INDEX) == set(stored)
    assert index_of(count_db, keys.RETAIN_INDEX) == set(retained)
    assert count_db.get(keys.INDEX_BUILT) == b"1"

    narrow = await Client(mqtt_port(bridge), "narrow", clean=False).connected()
    count_db.config_resetstat()
    await narrow.subscribe("a/+/c", qos=1)
    got = await narrow.expect(7)
    await narrow.expect_nothing()
    await bridge.idle()
    calls = command_calls(count_db)
    assert sorted((m.topic, m.retain) for m in got) == sorted(
        [(f"a/{i}/c", False) for i in (1, 2, 3)] * 2 + [("a/1/c", True)]
    )
    # 3 stored topics and 1 retained one; the 200 `b/` topics and 100k keys cost nothing
    assert calls.get("scan", 0) == 0, calls
    assert calls["zrangebylex"] == 2, calls  # one range in each index
    assert sum(calls.values()) <= 20, calls

    everything = await Client(mqtt_port(bridge), "everything", clean=False).connected()
    count_db.config_resetstat()
    await everything.subscribe("#", qos=1)
    got = await everything.expect(206 + 3)
    await everything.expect_nothing()
    await bridge.idle()
    calls = command_calls(count_db)
    assert {m.topic for m in got if m.retain} == {"a/1/c", "a/2/x", "b/7/c"}  # never `$SYS/r`
    assert {m.topic for m in got if not m.retain} == set(stored) - {"$SYS/x"}
    assert calls.get("scan", 0) == 0, calls
    assert calls["zrangebylex"] == 4, calls  # each index: the ranges below and above `$`
    # a ZRANGEBYSCORE and an HGETALL per stored topic, a ZRANGE and an HGETALL per retained one
    assert sum(calls.values()) <= 2 * (206 + 3) + 20, calls
    for client in (narrow, everything):
        await client.disconnect()


IN_STEP_RULES = """
backend.redis.hook.message.publish.1 = {"topic": "queue/#", "action": {"function": "on_message_publish"}}
backend.redis.hook.message.publish.4 = {"topic": "other/#", "action": {"function": "on_message_publish"}}
backend.redis.hook.message.publish.2 = {"topic": "#", "action": {"function": "on_message_retain"}}
backend.redis.hook.message.publish.3 = {"topic": "#", "action": {"function": "on_retain_delete"}}
backend.redis.hook.session.subscribed.1 = {"topic": "queue/#", "action": {"function": "on_message_fetch_for_queue"}}
backend.redis.hook.session.subscribed.2 = {"topic": "ghost/#", "action": {"function": "on_retain_lookup"}}
backend.redis.hook.message.acked.1 = {"topic": "queue/#", "action": {"function": "on_message_acked_for_queue"}}
"""


async def test_index_follows_store_ack_retain_and_expiry(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    bridge = await make_bridge(IN_STEP_RULES)  # no `expired_time`: no periodic trim here
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    for topic in ("queue/1", "queue/2", "queue/lazy", "other/1"):
        await publisher.publish(topic, b"m", qos=1)
    await publisher.publish("lamp/1", b"on", qos=1, retain=True)
    await bridge.idle()
    assert index_of(redis_db, keys.MSG_INDEX) == {"queue/1", "queue/2", "queue/lazy", "other/1"}
    assert index_of(redis_db, keys.RETAIN_INDEX) == {"lamp/1"}

    # a queue ack deletes the topic's last message: the topic leaves the index
    subscriber = await Client(mqtt_port(bridge), "s", clean=False).connected()
    await subscriber.subscribe("queue/1", qos=1)
    await subscriber.expect(1)
    await wait_until(lambda: "queue/1" not in index_of(redis_db, keys.MSG_INDEX), what="queue/1 unindexed")
    assert redis_db.exists("mqtt:msg:queue/1") == 0

    # a retain delete empties the topic's retained set: it leaves the retained index
    await publisher.publish("lamp/1", b"", qos=1, retain=True)
    await bridge.idle()
    assert index_of(redis_db, keys.RETAIN_INDEX) == set()

    # expiry: the message hash goes (as EXPIRE does it); a fetch that meets it drops the topic
    (msgid,) = redis_db.zrange(keys.topic_list("queue/lazy"), 0, -1)
    redis_db.delete(b"mqtt:msg:" + msgid)
    await subscriber.subscribe("queue/+", qos=1)
    got = await subscriber.expect(1)
    assert [m.topic for m in got] == ["queue/2"]
    await bridge.idle()
    assert index_of(redis_db, keys.MSG_INDEX) - {"queue/2"} == {"other/1"}  # queue/2 goes with its ack
    assert redis_db.exists("mqtt:msg:queue/lazy") == 0

    # a retained-index entry whose set was deleted by hand leaves when a lookup meets it
    redis_db.zadd(keys.RETAIN_INDEX, {"ghost/r": 0})
    await subscriber.subscribe("ghost/+", qos=1)
    await bridge.idle()
    await wait_until(lambda: index_of(redis_db, keys.RETAIN_INDEX) == set(), what="stale retained entry dropped")
    await subscriber.expect_nothing()
    for client in (publisher, subscriber):
        await client.disconnect()


TRIM_RULES = """
backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, "expired_time": 3600}
"""


async def test_periodic_trim_unindexes_emptied_topics(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> None:
    bridge = await make_bridge(TRIM_RULES, extra_config="backend.redis.pool1.trim_interval = 200ms\n")
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    for topic in ("kept", "expired/1", "expired/2"):
        await publisher.publish(topic, b"m", qos=1)
    await bridge.idle()
    for topic in ("expired/1", "expired/2"):  # their hashes expire (as EXPIRE does it)
        (msgid,) = redis_db.zrange(keys.topic_list(topic), 0, -1)
        redis_db.delete(b"mqtt:msg:" + msgid)
    redis_db.zadd(keys.MSG_INDEX, {"ghost": 0})  # an entry whose set was deleted by hand
    await wait_until(lambda: index_of(redis_db, keys.MSG_INDEX) == {"kept"}, what="the trim to unindex")
    assert redis_db.exists("mqtt:msg:expired/1", "mqtt:msg:expired/2") == 0
    assert redis_db.zcard("mqtt:msg:kept") == 1
    await publisher.disconnect()


def _publish_job(topic: str) -> Job:
    event = MessagePublish(IDS.next(), "w", None, topic, 1, b"new", False, "n", "p", 0.0)
    return Job(rule=SimpleNamespace(expired_time=0, time_scale=1), event=event)  # type: ignore[arg-type]


def _ack_job(topic: str, msgid: str) -> Job:
    event = MessageAcked(msgid, "s", None, "old", topic, 1, b"", False, "n", 0.0)
    return Job(rule=SimpleNamespace(expired_time=0, time_scale=1), event=event)  # type: ignore[arg-type]


async def _run_plan(redis: Any, plan: list[functions.Command]) -> None:
    for command in plan:
        if isinstance(command, functions.Script):
            await redis.register_script(scripts.ALL[command.name])(keys=command.keys, args=command.args)
        elif isinstance(command, Packed):  # a message that is not retained: its commands come packed
            (reply,) = await pipeline(redis.connection_pool, [command], 5.0)
            assert not isinstance(reply, Exception), reply
        else:  # a plain command
            await redis.execute_command(*command)


async def test_build_is_right_beside_concurrent_writers(redis_db: redis_sync.Redis, redis_port: int) -> None:
    add_unrelated_keys(redis_db, 30_000)
    old = {f"old/{i}": write_without_index(redis_db, f"old/{i}", b"m") for i in range(300)}
    redis = aioredis.Redis(port=redis_port, protocol=2)
    index = TopicIndex(redis)

    async def writer() -> None:
        # delete old topics (their last message acked) and store new ones while the SCAN runs
        for i in range(300):
            await _run_plan(redis, functions.acked_for_queue(_ack_job(f"old/{i}", old[f"old/{i}"])))
            await _run_plan(redis, functions.message_store(_publish_job(f"new/{i}")))

    await asyncio.gather(index.ensure(), writer())
    assert index.ready
    lists = {keys.dec(key[len(b"mqtt:msg:") :]) for key in redis_db.scan_iter(b"mqtt:msg:*", _type="zset")}
    assert lists == {f"new/{i}" for i in range(300)}
    assert index_of(redis_db, keys.MSG_INDEX) == lists
    # a set the SCAN saw but a writer deleted before the build's script ran is not indexed
    assert await index._add(keys=[keys.MSG_INDEX, b"mqtt:msg:gone"], args=[b"gone"]) == 0
    assert "gone" not in index_of(redis_db, keys.MSG_INDEX)
    await redis.aclose()


TOPICS = ["a", "a/b", "a/b/c", "a/x/c", "a/", "ab", "ab/c", "b/b/c", "/a", "/", "$SYS/a", "$SYS", "$x/b/c", "%", "#x"]
TOPICS += ["日本/c", "a/\udcff/c", "\udcff\udcff/z", "a/b/c/d"]
FILTERS = ["#", "+", "+/+", "+/b/c", "a/#", "a/+", "a/+/c", "a/b/#", "$SYS/#", "$SYS/+", "/#", "/+", "+/#"]
FILTERS += ["\udcff\udcff/#", "\udcff\udcff/+", "日本/+", "a/\udcff/#", "a/b/c/#", "ab/+", "%/#"]


@pytest.mark.parametrize("kind", [MSG, RETAIN], ids=["msg", "retain"])
async def test_matching_equals_the_topic_rules(redis_db: redis_sync.Redis, redis_port: int, kind: Any) -> None:
    for topic in TOPICS:
        write_without_index(redis_db, topic, b"m", retain=kind is RETAIN)
    redis = aioredis.Redis(port=redis_port, protocol=2)
    index = TopicIndex(redis)
    scanned = {f: await index.matching(kind, f) for f in FILTERS}  # before the build: SCAN
    await index.ensure()
    for topic_filter in FILTERS:
        expected = sorted(t for t in TOPICS if matches(topic_filter, t))
        assert await index.matching(kind, topic_filter) == expected, topic_filter
        assert scanned[topic_filter] == expected, topic_filter
    await redis.aclose()
