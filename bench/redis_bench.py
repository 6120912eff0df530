"""Messages per second persisted into Redis by on_message_publish, through the runner.

Compared in the same run with the ceiling (the same Lua-script writes, hand-batched into
pipelines of 500 with redis-py) and the naive way (one HSET + ZADD + EXPIRE round trip per
message, as a subscriber script would write it).

    .venv/bin/python -m bench.redis_bench [--messages 50000] [--runs 5] [--port 6393]
        [--batch-size N] [--batch-time 5ms] [--max-inflight N] [--pool-size N] [--json FILE]
"""

from __future__ import annotations

import argparse
import time

import redis.asyncio as aioredis

from actions.redis import keys, scripts
from bench.persistence import Database, Method, bench_main, compare, events_for, pool_config, pool_settings
from bridge.events import MessagePublish

TOPICS = 100
RULE = (
    'backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, '
    '"expired_time": 3600}\n'
)


def store_args(event: MessagePublish) -> list[object]:
    return [
        keys.message(event.msgid),
        keys.topic_list(event.topic),
        keys.retain(event.topic),
        keys.MSG_INDEX,
        event.msgid,
        keys.score(event.msgid),
        3600,
        event.clientid,
        event.qos,
        event.topic,
        event.payload,
        int(event.timestamp),
        "false",
    ]


async def ceiling(client: aioredis.Redis, events: list[MessagePublish]) -> float:
    sha = await client.script_load(scripts.STORE)
    started = time.perf_counter()
    for start in range(0, len(events), 500):
        pipe = client.pipeline(transaction=False)
        for event in events[start : start + 500]:
            pipe.evalsha(sha, 4, *store_args(event))  # type: ignore[arg-type]
        await pipe.execute()
    return len(events) / (time.perf_counter() - started)


async def naive(client: aioredis.Redis, events: list[MessagePublish]) -> float:
    started = time.perf_counter()
    for event in events:
        await client.hset(
            keys.message(event.msgid),
            mapping={  # type: ignore[misc]
                "id": event.msgid,
                "from": event.clientid,
                "qos": event.qos,
                "topic": event.topic,
                "payload": event.payload,
                "ts": int(event.timestamp),
                "retain": "false",
            },
        )
        await client.zadd(keys.topic_list(event.topic), {event.msgid: keys.score(event.msgid)})
        await client.expire(keys.message(event.msgid), 3600)
    return len(events) / (time.perf_counter() - started)


def bridge_config(port: int, settings: dict[str, str]) -> str:
    return pool_config("redis", settings, server=f"127.0.0.1:{port}")


async def stored(client: aioredis.Redis) -> tuple[int, int]:
    """Messages in the topics' sorted sets, and how many topics have one."""
    counts = [await client.zcard(key) async for key in client.scan_iter(match=b"mqtt:msg:*", _type="zset")]
    return sum(counts), len(counts)


async def main(args: argparse.Namespace) -> int:
    settings = pool_settings(args)
    events = events_for(args, TOPICS)
    client = aioredis.Redis(port=args.port, protocol=2)
    version = (await client.info("server"))["redis_version"]

    async def fresh() -> None:
        await client.flushall()

    db = Database(
        bridge_config(args.port, settings),
        settings,
        RULE,
        TOPICS,
        3600,
        f"Redis {version} on this machine",
        fresh,
        lambda: stored(client),
        unit="message",
    )
    try:
        return await compare(
            args,
            db,
            events,
            Method(
                "ceiling: hand-batched pipelines of the same script",
                args.messages,
                lambda n: ceiling(client, events[:n]),
            ),
            Method(
                "naive: one HSET+ZADD+EXPIRE round trip each", args.naive_messages, lambda n: naive(client, events[:n])
            ),
            ceiling_name="pipelined script",
        )
    finally:
        await client.aclose()


if __name__ == "__main__":
    bench_main("redis", 6393, 5_000, "redis.sh", main)
