"""Messages per second persisted into Redis by on_message_publish, through the runner.

Compared in the same run with the ceiling (the same Lua-script writes, hand-batched into
pipelines of 500 with redis-py) and the naive way (one HSET + ZADD + EXPIRE round trip per
message, as a subscriber script would write it).

    .venv/bin/python -m bench.redis_bench [--messages 50000] [--runs 5] [--port 6393]
        [--batch-size N] [--batch-time 5ms] [--max-inflight N] [--pool-size N] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

import redis.asyncio as aioredis

from actions.redis import keys, scripts
from bench.feed import make_events
from bench.persistence import (
    Method,
    measure,
    parse_args,
    pool_config,
    pool_settings,
    report,
    runner_latency,
    through_runner,
)
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
            pipe.evalsha(sha, 3, *store_args(event))  # type: ignore[arg-type]
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
    events = make_events(max(args.messages, args.naive_messages), args.payload, TOPICS)
    client = aioredis.Redis(port=args.port, protocol=2)
    config = bridge_config(args.port, settings)
    methods = [
        Method(
            "hookbridge runner (on_message_publish)", args.messages, lambda n: through_runner(config, RULE, events[:n])
        ),
        Method(
            "ceiling: hand-batched pipelines of the same script", args.messages, lambda n: ceiling(client, events[:n])
        ),
        Method("naive: one HSET+ZADD+EXPIRE round trip each", args.naive_messages, lambda n: naive(client, events[:n])),
    ]
    wrong = await measure(methods, args.runs, client.flushall, lambda: stored(client))
    await client.flushall()
    latency = await runner_latency(config, RULE, events[: min(args.messages, 20_000)], methods[0].median / 2)
    version = (await client.info("server"))["redis_version"]
    await client.flushall()
    await client.aclose()
    report(
        methods,
        [
            f"server: Redis {version} on this machine",
            f"payload {args.payload} B, {TOPICS} topics, expired_time 3600, {args.runs} runs each",
            f"runner pool settings: {', '.join(f'{k} {v}' for k, v in settings.items()) or 'defaults'}",
        ],
        ceiling="pipelined script",
        latency=latency,
        json_path=args.json,
    )
    for problem in wrong:
        print(f"WRONG COUNT: {problem}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    arguments = parse_args("redis", port=6393, naive_messages=5_000)
    subprocess.run(["bash", "scripts/redis.sh", str(arguments.port)], check=True, capture_output=True)
    sys.exit(asyncio.run(main(arguments)))
