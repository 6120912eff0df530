"""One payload that does not parse never costs other messages (docs/architecture.md#bad-input): 5 KB of nested
`[` made the JSON parser raise RecursionError, which escaped `parse_json_payload`, failed the
backend's plan and with it the whole batch: acknowledged messages of other publishers were lost.
Here, real Redis and PostgreSQL, several publishers' QoS 1 messages around the bad one (QoS 0, as
found), and a rule reading `${payload.v}`: every acknowledged message is stored, and the bad one
too, with a null v."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
import redis as redis_sync

from support.bridges import BridgeFactory, eventually, mqtt_port
from support.mqtt import Client
from support.services import postgres_dsn, start_postgres

PG_PORT = 5439
PUBLISHERS, PER_PUBLISHER = 6, 50
POOLS = (
    "backend.redis.pool1.server = 127.0.0.1:{redis}\nbackend.redis.pool1.batch_time = 50ms\n"
    "backend.redis.pool1.max_inflight = 2\n"
    f"backend.pgsql.pool1.server = 127.0.0.1:{PG_PORT}\nbackend.pgsql.pool1.username = hookbridge\n"
    "backend.pgsql.pool1.password = hookbridge\nbackend.pgsql.pool1.database = mqtt\n"
    "backend.pgsql.pool1.batch_time = 50ms\nbackend.pgsql.pool1.max_inflight = 2\n"
)
RULES = """\
backend.redis.hook.message.publish.1 = {"topic": "pv/#", "action": {"commands": ["HSET pv:${clientid} ${topic} ${payload.v}"]}}
backend.pgsql.hook.message.publish.1 = {"topic": "pv/#", "action": {"sql": ["INSERT INTO pv (topic, v) VALUES (${topic}, ${payload.v}) ON CONFLICT (topic) DO NOTHING"]}}
"""
NESTED = b"[" * 5000 + b"]" * 5000


@pytest.fixture
async def pg() -> AsyncIterator[asyncpg.Connection]:
    start_postgres(PG_PORT)
    conn = await asyncpg.connect(postgres_dsn(PG_PORT))
    await conn.execute("DROP TABLE IF EXISTS pv; CREATE TABLE pv (topic text PRIMARY KEY, v text)")
    yield conn
    await conn.execute("DROP TABLE IF EXISTS pv")
    await conn.close()


async def test_a_deeply_nested_payload_loses_no_other_message(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis, redis_port: int, pg: asyncpg.Connection
) -> None:
    bridge = await make_bridge(RULES, pools=POOLS.format(redis=redis_port))
    port = mqtt_port(bridge)
    bad = await Client(port, "pv-bad").connected()
    publishers = [await Client(port, f"pv-{n}").connected() for n in range(PUBLISHERS)]

    async def send(n: int, client: Client) -> None:
        items = [(f"pv/{n}/{i}", b'{"v": "%d-%d"}' % (n, i)) for i in range(PER_PUBLISHER)]
        await client.publish_many(items[: PER_PUBLISHER // 2])
        await client.publish_many(items[PER_PUBLISHER // 2 :])

    sending = [asyncio.create_task(send(n, c)) for n, c in enumerate(publishers)]
    await bad.publish("pv/bad/0", NESTED, qos=0)  # in the middle of the others' batches
    await bad.publish("pv/bad/1", NESTED, qos=1)
    await asyncio.gather(*sending)  # every message acknowledged

    def redis_count() -> int:
        return sum(redis_db.hlen(f"pv-{n}".join(["pv:", ""])) for n in range(PUBLISHERS))

    async def counts() -> tuple[int, int]:
        return redis_count(), int(await pg.fetchval("SELECT count(*) FROM pv WHERE topic NOT LIKE 'pv/bad/%'"))

    expected = PUBLISHERS * PER_PUBLISHER
    await eventually(counts, lambda found: found == (expected, expected), timeout=30)
    assert redis_db.hget("pv:pv-3", "pv/3/7") == b"3-7"
    assert await pg.fetchval("SELECT v FROM pv WHERE topic = 'pv/4/9'") == "4-9"
    await eventually(lambda: pg.fetchval("SELECT count(*) FROM pv WHERE topic LIKE 'pv/bad/%'"), lambda n: n == 2)
    assert await pg.fetchval("SELECT count(*) FROM pv WHERE topic LIKE 'pv/bad/%' AND v IS NULL") == 2
    assert redis_db.hlen("pv:pv-bad") == 2
    for client in (bad, *publishers):
        await client.disconnect()
