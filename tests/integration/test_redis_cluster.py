"""`type = cluster` pools on a real Redis Cluster (scripts/redis_cluster.sh: three masters, three
replicas on loopback, private ports): the walkthrough and offsets suites run on it as they are
(the same tests, this module's `make_bridge` and `redis_db`), the cluster's own index and steps are
checked, and a master is killed (SIGKILL) under load: its replica is promoted and every message
the broker acknowledged is stored exactly once and fetched in publish order (wait_replicas = 1,
WAIT on every master the batch wrote)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import ClusterNode, RedisCluster

from actions.redis.auth import RedisAcl, RedisUsers
from actions.redis.emqx44 import migrate_redis
from actions.redis.index import MSG, TopicIndex
from bridge.conf.config import parse_config
from bridge.emqx_msgid import convert
from support.bridges import BridgeFactory, mqtt_port
from support.conf import config_text
from support.mqtt import Client, wait_until
from support.services import ROOT
from tests.integration import test_redis_offsets as offsets
from tests.integration import test_redis_walkthrough as walkthrough
from tests.integration.test_migrate_emqx44 import unmigrated_retained_keys_are_errors_of_their_topic, write_as_emqx44

PORT = 7100  # the six nodes on PORT..PORT+5
DIR = ROOT / ".run" / f"redis-cluster-{PORT}"
SCRIPT = ROOT / "scripts" / "redis_cluster.sh"
SEEDS = ", ".join(f"127.0.0.1:{PORT + n}" for n in range(3))
POOL = (
    "backend.redis.pool1.type = cluster\n"
    f"backend.redis.pool1.server = {SEEDS}\n"
    "backend.redis.pool1.wait_replicas = 1\n"
    "backend.redis.pool1.batch_time = 1ms\n"
    "backend.redis.pool1.request_timeout = 2s\n"
    "backend.redis.pool1.retry_backoff_max = 200ms\n"
)


def _script(action: str) -> None:
    subprocess.run(["bash", str(SCRIPT), str(PORT), action], check=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """A fresh cluster for this module (the failover test leaves the roles swapped), stopped after."""
    _script("stop")
    _script("start")
    yield
    _script("stop")


def _client() -> RedisCluster:
    """A client of the test's own (any node that answers: a killed one may be the first)."""
    nodes = [ClusterNode("127.0.0.1", PORT + n) for n in range(6)]
    return RedisCluster(startup_nodes=nodes, protocol=2)


@pytest.fixture
def redis_db(cluster: None) -> Iterator[RedisCluster]:
    """The walkthrough's `redis_db` on the cluster: every master emptied, replies bytes."""
    client = _client()
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    client.close()


@pytest.fixture
def make_bridge(make_bridge: BridgeFactory, cluster: None) -> BridgeFactory:
    """The conftest's bridges, with the cluster pool unless a test gives its own pools."""

    async def factory(*args: Any, pools: str | None = None, **kwargs: Any) -> Any:
        return await make_bridge(*args, pools=pools or POOL, **kwargs)

    return factory


# The Redis suites, as they are, on the cluster.
test_online_status = walkthrough.test_online_status
test_proxy_subscription = walkthrough.test_proxy_subscription
test_message_list_and_details = walkthrough.test_message_list_and_details
test_retained_message_set_replace_clear = walkthrough.test_retained_message_set_replace_clear
test_offline_queue_and_pubsub_through_the_broker = walkthrough.test_offline_queue_and_pubsub_through_the_broker
test_offline_messages_survive_a_bridge_restart = walkthrough.test_offline_messages_survive_a_bridge_restart
test_queue_fetch_after_restart_and_retain_lookup = walkthrough.test_queue_fetch_after_restart_and_retain_lookup
test_colliding_client_cannot_move_or_drop = offsets.test_a_colliding_client_cannot_move_or_drop_another_clients_offset


def test_the_script_reuses_a_running_cluster_and_reports_it(cluster: None) -> None:
    """scripts/redis_cluster.sh as a user runs it (executable): `start` again reuses the cluster,
    `status` shows it ok with three masters and three replicas."""
    again = subprocess.run([str(SCRIPT), str(PORT), "start"], capture_output=True, text=True, check=True)
    assert "already answering" in again.stderr
    status = subprocess.run([str(SCRIPT), str(PORT), "status"], capture_output=True, text=True, check=True)
    lines = status.stdout.splitlines()
    assert lines[0] == "cluster_state:ok"
    roles = [line.split()[2].replace("myself,", "") for line in lines[1:]]
    assert (roles.count("master"), roles.count("slave")) == (3, 3)


async def test_keys_spread_over_masters_and_the_index_is_one_slot(
    make_bridge: BridgeFactory, redis_db: RedisCluster
) -> None:
    bridge = await make_bridge()
    client = await Client(mqtt_port(bridge), "spread").connected()
    for n in range(30):
        await client.publish(f"spread/{n}", f"p{n}".encode(), qos=1)
    await client.publish("spread/r", b"kept", qos=1, retain=True)
    await bridge.idle()
    masters = {redis_db.get_node_from_key(f"mqtt:msg:spread/{n}").name for n in range(30)}
    assert len(masters) == 3  # the topic lists live on every master
    assert redis_db.zrange(b"mqtt:index:{msg}", 0, -1) == sorted(
        [f"spread/{n}".encode() for n in range(30)] + [b"spread/r"]
    )
    assert redis_db.zrange(b"mqtt:index:{retain}", 0, -1) == [b"spread/r"]
    stamps = redis_db.hgetall(b"mqtt:index:{msg}:stamps")
    assert stamps[b"spread/0"] == b"1" and stamps[b"spread/r"] == b"1"
    await client.disconnect()


async def test_wildcard_fetch_and_retain_lookup_across_masters(
    make_bridge: BridgeFactory, redis_db: RedisCluster
) -> None:
    bridge = await make_bridge()
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    for n in range(6):
        await publisher.publish(f"queue/w/{n}", f"job {n}".encode(), qos=1)
    await publisher.publish("cfg/a", b"A", qos=1, retain=True)
    await publisher.publish("cfg/b", b"B", qos=1, retain=True)
    await publisher.disconnect()
    await bridge.stop()  # the broker forgets its retained messages

    bridge = await make_bridge()
    worker = await Client(mqtt_port(bridge), "w", clean=False).connected()
    await worker.subscribe("queue/w/+", qos=1)
    got = await worker.expect(6)
    assert [m.payload for m in got] == [f"job {n}".encode() for n in range(6)]  # publish order
    await wait_until(lambda: all(redis_db.zcard(f"mqtt:msg:queue/w/{n}") == 0 for n in range(6)), what="acks")
    viewer = await Client(mqtt_port(bridge), "v").connected()
    await viewer.subscribe("cfg/+", qos=1)
    assert sorted((m.topic, m.payload) for m in await viewer.expect(2)) == [("cfg/a", b"A"), ("cfg/b", b"B")]
    for c in (worker, viewer):
        await c.disconnect()


COMMANDS_RULES = (
    'backend.redis.hook.message.publish.1 = {"topic": "c/#", "action": {"commands": '
    '["HSET seen:${clientid} ${topic} ${payload}", "RPUSH log:${clientid} ${payload}"]}, "pool": "pool1"}\n'
    'backend.redis.hook.message.publish.2 = {"topic": "c/#", "action": {"commands": ["DBSIZE"]}, "pool": "pool1"}\n'
    'backend.redis.hook.message.publish.3 = {"topic": "c/#", "action": {"commands": ["INCR n:${clientid}"], '
    '"pipeline": false}, "pool": "pool1"}\n'
)


async def test_own_commands_go_to_the_master_of_their_key(make_bridge: BridgeFactory, redis_db: RedisCluster) -> None:
    bridge = await make_bridge(rules=COMMANDS_RULES)
    client = await Client(mqtt_port(bridge), "cmd").connected()
    for n in range(3):
        await client.publish(f"c/{n}", f"v{n}".encode(), qos=1)
    await bridge.idle()
    assert redis_db.hgetall("seen:cmd") == {b"c/0": b"v0", b"c/1": b"v1", b"c/2": b"v2"}
    assert redis_db.lrange("log:cmd", 0, -1) == [b"v0", b"v1", b"v2"]  # in order
    assert redis_db.get("n:cmd") == b"3"  # `"pipeline": false`: one by one through RedisCluster
    rules = bridge.metrics.rules
    assert (
        rules["redis.message.publish.1"]["succeeded"],
        rules["redis.message.publish.2"]["failed"],
    ) == (3, 3)  # a command without a key: its rule fails, not the batch
    await client.disconnect()


async def test_the_index_drops_an_entry_only_if_no_write_came_since(redis_db: RedisCluster) -> None:
    """The trim and the lazy trim on a cluster: an entry whose set is empty is dropped, unless a
    write of the topic moved its stamp after the stamp was read (that write's message is listed
    by then, or will be, and a fetch must find the topic)."""
    client = AsyncRedisCluster(host="127.0.0.1", port=PORT, protocol=2)
    index = TopicIndex(client, cluster=True)
    index_key, stamps = b"mqtt:index:{msg}", b"mqtt:index:{msg}:stamps"
    try:
        await index._touch(keys=[index_key, stamps], args=[b"gone/t", b"raced/t", b"kept/t"])
        redis_db.zadd("mqtt:msg:kept/t", {"00000000000000000000000000000001": 1})
        await index.forget(MSG, "gone/t")  # its set is empty: dropped
        await index.forget(MSG, "kept/t")  # its set holds a message: kept
        seen = redis_db.hget(stamps, "raced/t")
        await index._touch(keys=[index_key, stamps], args=[b"raced/t"])  # a store lands in between
        assert await index._drop(keys=[index_key, stamps], args=[b"raced/t", seen]) == 0
        assert redis_db.zrange(index_key, 0, -1) == [b"kept/t", b"raced/t"]
    finally:
        await client.aclose()


async def test_users_and_acl_of_the_embedded_broker_on_a_cluster(redis_db: RedisCluster) -> None:
    redis_db.hset("mqtt_user:alice", mapping={"password": "hashed", "salt": "s", "is_superuser": 1})
    redis_db.hset("mqtt_acl:alice", mapping={"alice/#": 3, "news/+": 1})
    pool = parse_config("bridge.conf", config_text(pools=POOL)).pools["redis.pool1"]
    users, acl = RedisUsers(pool), RedisAcl(pool)
    try:
        found = await users.find("alice")
        assert found is not None and (found.password, found.salt, found.superuser) == ("hashed", "s", True)
        assert await users.find("nobody") is None
        assert len(await acl.entries("alice", "c1")) == 2
    finally:
        await users.close()
        await acl.close()


async def test_migrate_emqx44_on_a_cluster(redis_db: RedisCluster) -> None:
    """EMQX 4.4's keys on a cluster: one key per step, so the migration runs there, twice the same."""
    ids = write_as_emqx44(redis_db)
    client = AsyncRedisCluster(host="127.0.0.1", port=PORT, protocol=2)
    try:
        counts = await migrate_redis(client, cluster=True)
        assert (counts.messages, counts.retained, counts.offsets, counts.gone) == (4, 3, 1, 1)
        again = await migrate_redis(client, cluster=True)
        assert (again.messages, again.retained, again.offsets, again.gone) == (0, 0, 0, 0)
    finally:
        await client.aclose()
    new = {name: convert(value)[1] for name, value in ids.items()}
    assert redis_db.zrange("mqtt:msg:pubsub/t", 0, -1) == [new[n].encode() for n in ("e1", "e2", "e3")]
    assert redis_db.get("mqtt:acked:dev1:pubsub/t") == new["e1"].encode()
    assert redis_db.hget(f"mqtt:msg:{new['e2']}", "id") == new["e2"].encode()
    assert not any(redis_db.exists(f"mqtt:msg:{value}") for name, value in ids.items() if name != "e3")  # e3: hex
    assert redis_db.zrange(b"mqtt:index:{msg}", 0, -1) == [b"pubsub/t", b"status/x"]
    # the retained key in each of EMQX's forms (sorted set, string, hash) is a sorted set now
    assert redis_db.zrange(b"mqtt:index:{retain}", 0, -1) == [b"status/h", b"status/s", b"status/x"]


async def test_a_retained_key_emqx_wrote_unmigrated_is_a_counted_error_for_its_topic_only(
    make_bridge: BridgeFactory, redis_db: RedisCluster
) -> None:
    await unmigrated_retained_keys_are_errors_of_their_topic(redis_db, make_bridge)


def _master_of(key: str) -> int:
    client = _client()
    try:
        return int(client.get_node_from_key(key).port)
    finally:
        client.close()


def _promoted(dead: int) -> bool:
    """Some node answers with cluster_state:ok and no master is the dead one."""
    try:
        client = _client()
    except Exception:
        return False
    try:
        info = client.cluster_info(target_nodes=RedisCluster.RANDOM)
        masters = {int(node.port) for node in client.get_primaries()}
        return info.get("cluster_state") == "ok" and dead not in masters and len(masters) == 3
    except Exception:
        return False
    finally:
        client.close()


def _revive(port: int) -> None:
    """What an operator does after a failover: start the dead node again; its cluster config file
    names the cluster, and it joins as a replica of the master that replaced it."""
    subprocess.run(
        [
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--daemonize", "yes",
            "--dir", str(DIR), "--pidfile", str(DIR / f"node-{port}.pid"),
            "--logfile", str(DIR / f"node-{port}.log"), "--dbfilename", f"node-{port}.rdb",
            "--save", "", "--appendonly", "no", "--cluster-enabled", "yes",
            "--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout", "3000",
        ],
        check=True,
    )  # fmt: skip


LOAD_RULES = (
    'backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, "pool": "pool1"}\n'
    'backend.redis.hook.session.subscribed.1 = {"topic": "queue/#", "action": {"function": "on_message_fetch_for_queue"}, '
    '"offline_opts": {"max_returned_count": 500}, "pool": "pool1"}\n'
)


@pytest.mark.slow
async def test_master_killed_under_load_nothing_acknowledged_is_lost(
    make_bridge: BridgeFactory, redis_db: RedisCluster
) -> None:
    topic = "queue/load"
    bridge = await make_bridge(rules=LOAD_RULES)
    client = await Client(mqtt_port(bridge), "cluster-load").connected()
    acks: list[asyncio.Future[int]] = []  # one per PUBLISH, done once PUBACKed
    enough = asyncio.Event()

    async def publish() -> None:  # about 1,000 messages a second until told to stop
        while not enough.is_set():
            for _ in range(10):
                acks.append(client.send(topic, f"m{len(acks)}".encode(), 1))
            await asyncio.sleep(0.01)

    def acked() -> int:
        return sum(1 for ack in acks if ack.done())

    publisher = asyncio.create_task(publish())
    await wait_until(lambda: acked() >= 500, timeout=30, what="500 PUBACKs before the kill")
    victim = _master_of(f"mqtt:msg:{topic}")  # the master of the topic's list (and of a third of the hashes)
    os.kill(int((DIR / f"node-{victim}.pid").read_text()), signal.SIGKILL)
    await wait_until(lambda: _promoted(victim), timeout=60, what="the cluster to promote the replica")
    _revive(victim)  # wait_replicas = 1: the new master needs a replica again
    await asyncio.sleep(1)  # load on the new master with its new replica
    enough.set()
    await publisher
    count = len(acks)
    await wait_until(lambda: acked() == count, timeout=120, what="every PUBACK")

    stored = _client()
    await wait_until(lambda: stored.zcard(f"mqtt:msg:{topic}") >= count, timeout=60, what="every message listed")
    ids = stored.zrange(f"mqtt:msg:{topic}", 0, -1)
    payloads = [stored.hget(b"mqtt:msg:" + msgid, "payload") for msgid in ids]
    assert payloads == [f"m{i}".encode() for i in range(count)]  # each once, in publish order
    stored.close()
    await client.disconnect()

    reader = await Client(mqtt_port(bridge), "cluster-reader", clean=False).connected()
    await reader.subscribe(topic, qos=1)
    assert [m.payload for m in await reader.expect(500)] == [f"m{i}".encode() for i in range(500)]
    await reader.disconnect()
