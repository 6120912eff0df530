"""The spool's bound, in the bridge: `block` holds publishers back, `drop_oldest` drops and counts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client
from support.services import start_redis, stop_redis

PORT = 6421  # this module's own Redis: stopped and started by its tests
BATCH = 50  # the most actions in flight (being written) when the pool goes down
RULES = 'backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}}\n'
POOL = (
    f"backend.redis.pool1.server = 127.0.0.1:{PORT}\nbackend.redis.pool1.retry_backoff_max = 200ms\n"
    "backend.redis.pool1.max_inflight = 1\n"  # one lane: one order to check
    f"backend.redis.pool1.batch_size = {BATCH}\n"
)
SMALL_SPOOL = "spool.max_bytes = 256KB\n"


@pytest.fixture
async def down_redis() -> AsyncIterator[None]:
    """This module's Redis, emptied and stopped (emptied first: when the test starts it again the
    bridge writes at once, and a FLUSHALL then would race those writes)."""
    await asyncio.to_thread(start_redis, PORT)
    client = aioredis.Redis(port=PORT, protocol=2)
    await client.flushall()
    await client.aclose()
    await asyncio.to_thread(stop_redis, PORT)
    yield
    await asyncio.to_thread(stop_redis, PORT)


async def redis_up() -> aioredis.Redis:
    await asyncio.to_thread(start_redis, PORT)
    return aioredis.Redis(port=PORT, protocol=2)


async def stored(client: aioredis.Redis, topic: str) -> list[bytes]:
    ids = await client.zrange(f"mqtt:msg:{topic}", 0, -1)
    return [await client.hget(b"mqtt:msg:" + msgid, "payload") or b"" for msgid in ids]


async def test_drop_oldest_drops_the_oldest_and_counts_them(make_bridge: BridgeFactory, down_redis: None) -> None:
    bridge = await make_bridge(RULES, pools=POOL, extra_config=SMALL_SPOOL + "spool.overflow = drop_oldest\n")
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    sent = [b"%05d" % n + b"." * 300 for n in range(3000)]  # about 1 MB for a 256 KB spool
    await publisher.publish_many([("t/drop", payload) for payload in sent])  # never held back
    counts = bridge.metrics.rules["redis.message.publish.1"]
    assert counts["dropped"] > 0
    client = await redis_up()
    await asyncio.wait_for(bridge.idle(), 60)
    kept = await stored(client, "t/drop")
    # The batch being retried when the pool went down is never dropped (it is in flight: at most
    # batch_size actions); the lane's memory queue spilled behind it is the oldest, dropped first;
    # after the batch, the newest survive, in order.
    head = next(n for n, (a, b) in enumerate(zip([*kept, None], sent, strict=False)) if a != b)
    assert head <= BATCH
    assert kept[head:] == sent[len(sent) - (len(kept) - head) :]
    assert len(kept) + counts["dropped"] == len(sent)
    assert counts["succeeded"] == len(kept)
    await publisher.disconnect()
    await client.aclose()


async def test_block_holds_publishers_back_until_the_spool_drains(make_bridge: BridgeFactory, down_redis: None) -> None:
    bridge = await make_bridge(RULES, pools=POOL, extra_config=SMALL_SPOOL + "backend.redis.pool1.queue_size = 100\n")
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    sent = [b"%05d" % n + b"." * 300 for n in range(3000)]
    publishing = asyncio.create_task(publisher.publish_many([("t/block", payload) for payload in sent]))
    await asyncio.sleep(3)
    assert not publishing.done()  # the spool is full: no more PUBACKs, the publisher waits
    assert bridge.spool_budget.used <= bridge.spool_budget.max_bytes + 64 << 10
    assert not bridge.health()[0]
    client = await redis_up()
    await asyncio.wait_for(publishing, 60)
    await asyncio.wait_for(bridge.idle(), 60)
    assert await stored(client, "t/block") == sent  # nothing dropped, nothing reordered
    assert bridge.metrics.rules["redis.message.publish.1"]["dropped"] == 0
    await publisher.disconnect()
    await client.aclose()
