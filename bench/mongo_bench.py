"""Messages per second persisted into MongoDB by on_message_publish, through the runner.

Compared in the same run, on the same generated events, with the ceiling (a hand-written
`insert_many(ordered=True)` of the same documents, in chunks of 10,000 on
one client, plus the distinct topics into mqtt_topic, as the runner writes them too) and the
naive way (one awaited `insert_one` per message, as a subscriber script would write it).
Both build their documents by hand from the events inside their timing (checked equal to
what the backend builds).
Every method starts from a dropped database with the schema applied. Besides messages per
second it prints the CPU time the benchmark process spent per message (the bridge's own cost,
or the driver's), which does not depend on how fast the server is.

The server here is FerretDB v1 over SQLite (scripts/ferretdb.sh): no MongoDB server is
packaged anywhere this machine reaches. Its absolute figures say little about MongoDB;
the ratios say how much the runner costs over the driver's own bulk path on the same server.

    .venv/bin/python -m bench.mongo_bench [--messages 50000] [--runs 5] [--port 27018]
        [--batch-size N] [--batch-time 5ms] [--max-inflight N] [--pool-size N]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bson.int64 import Int64
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from actions.base import FunctionContext, Job
from actions.mongo.backend import MongoBackend
from actions.mongo.functions import message_document
from bench.feed import feed, make_events
from bench.machine import describe, table
from bridge.app import Bridge, Paths
from bridge.conf.config import load_config
from bridge.events import MessagePublish
from bridge.rules import Rule

EXPIRED_TIME = 3600
TOPICS = 100
CHUNK = 10_000
RULE = (
    'backend.mongo.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, '
    f'"expired_time": {EXPIRED_TIME}}}\n'
)

Db = AsyncDatabase[dict[str, Any]]
Method = Callable[[Db, list[MessagePublish]], Awaitable[float]]


def bridge_config(port: int, settings: dict[str, str]) -> str:
    lines = [
        f"backend.mongo.pool1.server = 127.0.0.1:{port}",
        "backend.mongo.pool1.database = bench",
        *(f"backend.mongo.pool1.{key} = {value}" for key, value in settings.items()),
        "metrics.listener = off",
        "broker.listener.tcp = 127.0.0.1:0",
    ]
    return "\n".join(lines) + "\n"


def load(workdir: Path, port: int, settings: dict[str, str]) -> Bridge:
    (workdir / "rules").mkdir(exist_ok=True)
    (workdir / "rules" / "bench.conf").write_text(RULE)
    (workdir / "bridge.conf").write_text(bridge_config(port, settings))
    return Bridge.load(Paths(workdir / "bridge.conf", workdir / "rules"))


async def fresh_database(client: AsyncMongoClient[dict[str, Any]], port: int) -> None:
    """Drop the database, then create the collections and indexes as the bridge does."""
    await client.drop_database("bench")
    config = load_config_text(port)
    backend = MongoBackend(config.pools["mongo.pool1"], FunctionContext(node="bench"))
    await backend.connect()
    await backend.close()


def load_config_text(port: int) -> Any:
    with tempfile.TemporaryDirectory(prefix="mongo-bench-") as tmp:
        path = Path(tmp) / "bridge.conf"
        path.write_text(bridge_config(port, {}))
        return load_config(path)


async def through_runner(port: int, settings: dict[str, str], events: list[MessagePublish]) -> float:
    with tempfile.TemporaryDirectory(prefix="mongo-bench-") as tmp:
        bridge = load(Path(tmp), port, settings)
        await bridge.start()
        try:
            started = time.perf_counter()
            await feed(bridge, events)
            await bridge.idle()
            elapsed = time.perf_counter() - started
        finally:
            await bridge.stop()
    return len(events) / elapsed


async def cpu_per_message(count: int, run: Awaitable[float]) -> tuple[float, float]:
    """(msg/s, µs of this process's CPU per message): the server here is slow, the client is not."""
    cpu = time.process_time()
    rate = await run
    return rate, (time.process_time() - cpu) / count * 1e6


def same_documents(event: MessagePublish, port: int) -> bool:
    """The hand-written document is the one the backend builds (so both store the same)."""
    with tempfile.TemporaryDirectory(prefix="mongo-bench-") as tmp:
        rule: Rule = load(Path(tmp), port, {}).engine.rules[0]
    return message_document(Job(rule, event)) == hand_written(event)


def hand_written(event: MessagePublish) -> dict[str, Any]:
    """The document the backend stores, built by hand (the ceiling builds its own, in its timing)."""
    arrived = dt.datetime.fromtimestamp(event.timestamp, tz=dt.UTC)
    return {
        "_id": event.msgid,
        "msgid": event.msgid,
        "seq": Int64(int(event.msgid[:16], 16)),
        "sender": event.clientid,
        "topic": event.topic,
        "qos": event.qos,
        "retain": event.retain,
        "payload": event.payload,
        "arrived": arrived,
        "expires_at": arrived + dt.timedelta(seconds=EXPIRED_TIME),
    }


async def ceiling(db: Db, events: list[MessagePublish]) -> float:
    started = time.perf_counter()
    await db.mqtt_topic.insert_many([{"_id": topic} for topic in sorted({event.topic for event in events})])
    for start in range(0, len(events), CHUNK):
        await db.mqtt_msg.insert_many([hand_written(event) for event in events[start : start + CHUNK]], ordered=True)
    return len(events) / (time.perf_counter() - started)


async def naive(db: Db, events: list[MessagePublish]) -> float:
    started = time.perf_counter()
    for event in events:
        await db.mqtt_msg.insert_one(hand_written(event))
    return len(events) / (time.perf_counter() - started)


async def server(client: AsyncMongoClient[dict[str, Any]]) -> str:
    info = await client.admin.command("buildInfo")
    if "ferretdbVersion" not in info:
        return f"MongoDB {info['version']}"
    return f"FerretDB {ferretdb_version()} over SQLite (reports MongoDB {info['version']})"


def ferretdb_version() -> str:
    gomod = (Path(__file__).resolve().parents[1] / "scripts" / "ferretdb" / "go.mod").read_text()
    return next((line.split()[-1] for line in gomod.splitlines() if "FerretDB/FerretDB " in line), "?")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--naive-messages", type=int, default=2_000)
    parser.add_argument("--payload", type=int, default=200)
    parser.add_argument("--port", type=int, default=27018)
    parser.add_argument("--runs", type=int, default=5, help="rounds of the three methods; the median is shown")
    pool = parser.add_argument_group("runner pool settings (default: the bridge's defaults)")
    pool.add_argument("--batch-size", help="backend.mongo.pool1.batch_size")
    pool.add_argument("--batch-time", help="backend.mongo.pool1.batch_time, e.g. 5ms")
    pool.add_argument("--max-inflight", help="backend.mongo.pool1.max_inflight")
    pool.add_argument("--pool-size", help="backend.mongo.pool1.pool_size")
    return parser.parse_args()


async def main(args: argparse.Namespace) -> int:
    settings = {
        key: str(value)
        for key, value in (
            ("batch_size", args.batch_size),
            ("batch_time", args.batch_time),
            ("max_inflight", args.max_inflight),
            ("pool_size", args.pool_size),
        )
        if value is not None
    }
    events = make_events(max(args.messages, args.naive_messages), args.payload, TOPICS)
    if not same_documents(events[0], args.port):
        print("the hand-written document differs from the backend's: fix hand_written()", file=sys.stderr)
        return 1
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        f"mongodb://127.0.0.1:{args.port}/?directConnection=true"
    )
    version = await server(client)
    db = client.bench
    methods: list[tuple[str, Method | None, int]] = [
        ("hookbridge runner (on_message_publish)", None, args.messages),
        ("ceiling: insert_many(ordered=True), 10,000-doc chunks (+ topics)", ceiling, args.messages),
        ("naive: one awaited insert_one per message", naive, args.naive_messages),
    ]
    rates: list[list[float]] = [[] for _ in methods]
    cpus: list[list[float]] = [[] for _ in methods]
    counts: list[tuple[int, int]] = [(0, 0)] * len(methods)
    wrong = []
    for _ in range(args.runs):  # rounds of all three, so a busy moment of the machine hits them alike
        for index, (name, run, count) in enumerate(methods):
            await fresh_database(client, args.port)
            work = through_runner(args.port, settings, events[:count]) if run is None else run(db, events[:count])
            rate, cpu = await cpu_per_message(count, work)
            cpus[index].append(cpu)
            stored = await db.mqtt_msg.count_documents({})
            topics = await db.mqtt_topic.count_documents({})
            if stored != count:
                wrong.append(f"{name}: {stored} documents in mqtt_msg, expected {count}")
            rates[index].append(rate)
            counts[index] = (stored, topics)
    await client.drop_database("bench")
    await client.close()
    medians = [statistics.median(runs) for runs in rates]
    results: list[tuple[str, ...]] = [
        (
            name,
            f"{count}",
            f"{median:,.0f}",
            ", ".join(f"{rate:,.0f}" for rate in runs),
            f"{statistics.median(cpu):.1f}",
            f"{stored}",
            f"{topics}",
        )
        for (name, _, count), median, runs, cpu, (stored, topics) in zip(
            methods, medians, rates, cpus, counts, strict=True
        )
    ]
    pool = ", ".join(f"{key} {value}" for key, value in settings.items()) or "defaults"
    print(f"machine: {describe()}")
    print(f"server: {version}, on this machine")
    print(f"payload {args.payload} B, {TOPICS} topics, expired_time {EXPIRED_TIME}, {args.runs} runs each")
    print(f"runner pool settings: {pool}")
    print("the ceiling also inserts the distinct topics into mqtt_topic, as the runner does; the naive way does not\n")
    header = ("method", "messages", "median msg/s", "runs", "client CPU µs/msg", "mqtt_msg docs", "mqtt_topic docs")
    print(table(results, header))
    runner_rate, ceiling_rate, naive_rate = medians
    share, factor = runner_rate / ceiling_rate, runner_rate / naive_rate
    print(
        f"\nrunner = {share:.0%} of the insert_many ceiling (target >= 50%: {'met' if share >= 0.5 else 'NOT met'}), "
        f"{factor:.1f}x the naive way"
    )
    for problem in wrong:
        print(f"WRONG DOCUMENT COUNT: {problem}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    arguments = parse_args()
    subprocess.run(["bash", "scripts/ferretdb.sh", str(arguments.port)], check=True, capture_output=True)
    sys.exit(asyncio.run(main(arguments)))
