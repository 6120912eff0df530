"""A full or read-only database is unavailable, not a permanent failure (docs/operations.md#what-happens-when-a-database-is-down): its
actions wait in the spool and are written once it accepts writes again; an action that fails for
good lands in the dead-letter file with its reason, never silently dropped. Real servers: this
module's own Redis and PostgreSQL (their state is changed here, so not the shared instances),
and the shared test Redis for the dead letter."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator

import asyncpg
import pytest
import redis as redis_sync
import redis.asyncio as aioredis

from support.bridges import BridgeFactory, eventually, mqtt_port
from support.mqtt import Client
from support.services import postgres_dsn, start_postgres, start_redis, stop_redis

REDIS_PORT = 6425  # this module's own servers: made full or read-only by its tests
PG_PORT = 5449
MESSAGES = 200


@pytest.fixture
async def own_redis() -> AsyncIterator[aioredis.Redis]:
    await asyncio.to_thread(start_redis, REDIS_PORT)
    client = aioredis.Redis(port=REDIS_PORT, protocol=2)
    await client.flushall()
    yield client
    await client.config_set("maxmemory", 0)
    await client.aclose()
    await asyncio.to_thread(stop_redis, REDIS_PORT)


async def test_redis_out_of_memory_keeps_acknowledged_messages_until_memory_is_freed(
    make_bridge: BridgeFactory, own_redis: aioredis.Redis
) -> None:
    pools = (
        f"backend.redis.pool1.server = 127.0.0.1:{REDIS_PORT}\nbackend.redis.pool1.retry_backoff_max = 200ms\n"
        "backend.redis.pool1.batch_time = 1ms\n"
    )
    rules = 'backend.redis.hook.message.publish.1 = {"topic": "oom/#", "action": {"commands": ["SET ${topic} ${payload}"]}}\n'
    bridge = await make_bridge(rules, pools=pools)
    used = int((await own_redis.info("memory"))["used_memory"])
    await own_redis.config_set("maxmemory-policy", "noeviction")
    await own_redis.config_set("maxmemory", max(1 << 20, used + (256 << 10)))  # 1mb, or a little over what it holds
    client = await Client(mqtt_port(bridge), "oom-pub").connected()
    payload = b"x" * 4096  # 200 x 4 KB: well past the limit
    await client.publish_many([(f"oom/{n}", payload) for n in range(MESSAGES)])  # all acknowledged
    assert not bridge.runners["redis.pool1"].healthy  # the OOM replies put the pool down

    async def stored() -> int:
        return len(await own_redis.keys("oom/*"))

    assert await stored() < MESSAGES
    await own_redis.config_set("maxmemory", 0)  # memory freed: the spool drains
    await eventually(stored, lambda n: n == MESSAGES, timeout=30)
    assert await own_redis.get("oom/199") == payload
    counts = bridge.metrics.rules["redis.message.publish.1"]
    assert counts["failed"] == 0 and counts.get("deadlettered", 0) == 0 and counts["spooled"] > 0
    await client.disconnect()


async def writable_connection() -> asyncpg.Connection:
    """A session of this module's PostgreSQL that may write whatever the database's default."""
    conn = await asyncpg.connect(postgres_dsn(PG_PORT))
    await conn.execute("SET default_transaction_read_only = off")
    return conn


@pytest.fixture
async def own_pg() -> AsyncIterator[asyncpg.Connection]:
    await asyncio.to_thread(start_postgres, PG_PORT)
    conn = await writable_connection()
    await conn.execute("ALTER DATABASE mqtt RESET default_transaction_read_only")
    await conn.execute("DROP TABLE IF EXISTS ro")
    yield conn
    conn = await writable_connection()
    await conn.execute("ALTER DATABASE mqtt RESET default_transaction_read_only")
    await conn.close()


async def read_only(conn: asyncpg.Connection, on: bool) -> None:
    """New sessions of the database read-only (or not), and the bridge's sessions ended so that
    its new ones take the setting."""
    await conn.execute(f"ALTER DATABASE mqtt SET default_transaction_read_only = {'on' if on else 'off'}")
    await conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'mqtt' AND pid <> pg_backend_pid()"
    )


async def test_a_read_only_postgresql_keeps_acknowledged_messages_also_at_start(
    make_bridge: BridgeFactory, own_pg: asyncpg.Connection
) -> None:
    await own_pg.execute("CREATE TABLE ro (topic text PRIMARY KEY, payload text)")
    await read_only(own_pg, True)  # from before the start: the pool's CREATE TABLE fails with 25006
    await own_pg.close()
    pools = (
        f"backend.pgsql.pool1.server = 127.0.0.1:{PG_PORT}\nbackend.pgsql.pool1.username = hookbridge\n"
        "backend.pgsql.pool1.password = hookbridge\nbackend.pgsql.pool1.database = mqtt\n"
        "backend.pgsql.pool1.retry_backoff_max = 200ms\n"
    )
    rules = (
        'backend.pgsql.hook.message.publish.1 = {"topic": "ro/#", "action": {"sql": '
        '["INSERT INTO ro (topic, payload) VALUES (${topic}, ${payload}) ON CONFLICT (topic) DO NOTHING"]}}\n'
    )
    bridge = await make_bridge(rules, pools=pools)  # starts: read-only is a state, not a refusal
    client = await Client(mqtt_port(bridge), "ro-pub").connected()
    await client.publish_many([(f"ro/{n}", b"m%d" % n) for n in range(50)])  # all acknowledged
    conn = await writable_connection()
    assert await conn.fetchval("SELECT count(*) FROM ro") == 0
    await read_only(conn, False)
    await eventually(lambda: conn.fetchval("SELECT count(*) FROM ro"), lambda n: n == 50, timeout=30)
    assert await conn.fetchval("SELECT payload FROM ro WHERE topic = 'ro/49'") == "m49"
    counts = bridge.metrics.rules["pgsql.message.publish.1"]
    assert counts["failed"] == 0 and counts.get("deadlettered", 0) == 0
    assert await conn.fetchval("SELECT count(*) FROM mqtt_msg") == 0  # the pool's own tables exist now
    await conn.close()
    await client.disconnect()


async def test_a_permanent_failure_lands_in_the_dead_letter_file_with_its_reason(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    rules = 'backend.redis.hook.message.publish.1 = {"topic": "dl/#", "action": {"commands": ["HSET ${topic} f ${payload}"]}}\n'
    bridge = await make_bridge(rules)
    redis_db.set("dl/string", "not a hash")  # HSET on it: WRONGTYPE, an error retrying will not change
    client = await Client(mqtt_port(bridge), "dl-pub").connected()
    await client.publish("dl/string", b"\x00kept\xff", qos=1)
    await client.publish("dl/hash", b"fine", qos=1)
    counts = bridge.metrics.rules["redis.message.publish.1"]

    async def done() -> tuple[int, int]:
        return counts.get("deadlettered", 0), counts["succeeded"]

    await eventually(done, lambda found: found == (1, 1))
    assert 'hookbridge_rule_deadlettered_total{pool="redis.pool1",rule="redis.message.publish.1"} 1.0' in (
        bridge.metrics.render()
    )
    path = bridge.dead_letters.directory / "redis.pool1.jsonl"
    [line] = path.read_text().splitlines()
    letter = json.loads(line)
    assert letter["rule"] == "redis.message.publish.1" and letter["pool"] == "redis.pool1"
    assert "WRONGTYPE" in letter["reason"] and letter["where"].endswith(":1:1")
    assert letter["event"]["topic"] == "dl/string" and letter["event"]["clientid"] == "dl-pub"
    assert base64.b64decode(letter["event"]["payload_base64"]) == b"\x00kept\xff"
    assert redis_db.hget("dl/hash", "f") == b"fine"
    await client.disconnect()
