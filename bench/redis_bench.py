"""Messages per second persisted into Redis by on_message_publish, through the runner.

Compared in the same run with the ceiling (the same Lua-script writes, hand-batched into
pipelines of 500 with redis-py) and the naive way (one HSET + ZADD + EXPIRE round trip per
message, as a subscriber script would write it).

    .venv/bin/python -m bench.redis_bench [--messages 50000] [--port 6393]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from pathlib import Path

import redis.asyncio as aioredis

from actions.redis import keys, scripts
from bench.feed import feed, make_events
from bench.machine import describe, table
from bridge.app import Bridge, Paths
from bridge.events import MessagePublish

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


async def through_runner(workdir: Path, port: int, events: list[MessagePublish]) -> float:
    (workdir / "rules").mkdir(parents=True, exist_ok=True)
    (workdir / "rules" / "bench.conf").write_text(RULE)
    (workdir / "bridge.conf").write_text(
        f"backend.redis.pool1.server = 127.0.0.1:{port}\nmetrics.listener = off\nbroker.listener.tcp = 127.0.0.1:0\n"
    )
    bridge = Bridge.load(Paths(workdir / "bridge.conf", workdir / "rules"))
    await bridge.start()
    started = time.perf_counter()
    await feed(bridge, events)
    await bridge.idle()
    elapsed = time.perf_counter() - started
    await bridge.stop()
    return len(events) / elapsed


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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--naive-messages", type=int, default=5_000)
    parser.add_argument("--payload", type=int, default=200)
    parser.add_argument("--port", type=int, default=6393)
    parser.add_argument("--workdir", default=".run/bench")
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    client = aioredis.Redis(port=args.port, protocol=2)
    results = []
    for name, run, count in (
        ("hookbridge runner (on_message_publish)", None, args.messages),
        ("ceiling: hand-batched pipelines of the same script", ceiling, args.messages),
        ("naive: one HSET+ZADD+EXPIRE round trip each", naive, args.naive_messages),
    ):
        await client.flushall()
        events = make_events(count, args.payload)
        rate = await through_runner(Path(args.workdir), args.port, events) if run is None else await run(client, events)
        stored = await client.dbsize()
        results.append((name, f"{count}", f"{rate:,.0f}", f"{stored}"))
    await client.flushall()
    await client.aclose()
    runner_rate = float(results[0][2].replace(",", ""))
    ceiling_rate = float(results[1][2].replace(",", ""))
    naive_rate = float(results[2][2].replace(",", ""))
    print(f"machine: {describe()}")
    print(f"payload {args.payload} B, 100 topics, expired_time 3600\n")
    print(table(results, ("method", "messages", "msg/s", "keys after")))
    print(f"\nrunner = {runner_rate / ceiling_rate:.0%} of the ceiling, {runner_rate / naive_rate:.1f}x the naive way")


if __name__ == "__main__":
    arguments = parse_args()
    subprocess.run(["bash", "scripts/redis.sh", str(arguments.port)], check=True, capture_output=True)
    asyncio.run(main(arguments))
