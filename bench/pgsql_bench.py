"""Messages per second persisted into PostgreSQL by on_message_publish, through the runner.

Compared in the same run, on the same generated events, with the ceiling (a hand-written
asyncpg COPY of the same rows into mqtt_msg in chunks of 10,000 on one connection, plus the
distinct topics into mqtt_topic, as the runner writes them too) and the naive way (one
autocommitted INSERT per message, awaited one by one, as a subscriber script would write it).
Every method starts from freshly created, empty mqtt_* tables.

    .venv/bin/python -m bench.pgsql_bench [--messages 50000] [--runs 5] [--port 5439]
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

import asyncpg

from actions.pgsql.functions import when
from actions.pgsql.schema import SCHEMA
from bench.feed import feed, make_events
from bench.machine import describe, table
from bridge.app import Bridge, Paths
from bridge.events import MessagePublish

EXPIRED_TIME = 3600
TOPICS = 100
CHUNK = 10_000
TABLES = "mqtt_client, mqtt_sub, mqtt_msg, mqtt_topic, mqtt_retain, mqtt_acked, mqtt_event_log"
COLUMNS = ["msgid", "sender", "topic", "qos", "retain", "payload", "arrived", "expires_at"]
RULE = (
    'backend.pgsql.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, '
    f'"expired_time": {EXPIRED_TIME}}}\n'
)
INSERT = f"INSERT INTO mqtt_msg ({', '.join(COLUMNS)}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
INSERT_TOPICS = "INSERT INTO mqtt_topic (topic) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING"

Method = Callable[[asyncpg.Connection, list[MessagePublish]], Awaitable[float]]


def dsn(port: int) -> str:
    return f"postgresql://hookbridge:hookbridge@127.0.0.1:{port}/mqtt"


def row(event: MessagePublish) -> tuple[Any, ...]:
    arrived = when(event.timestamp)
    expires = arrived + dt.timedelta(seconds=EXPIRED_TIME)
    return (event.msgid, event.clientid, event.topic, event.qos, event.retain, event.payload, arrived, expires)


async def fresh_tables(conn: asyncpg.Connection) -> None:
    await conn.execute(f"DROP TABLE IF EXISTS {TABLES}")
    for statement in SCHEMA:
        await conn.execute(statement)


def bridge_config(port: int, settings: dict[str, str]) -> str:
    lines = [
        f"backend.pgsql.pool1.server = 127.0.0.1:{port}",
        "backend.pgsql.pool1.username = hookbridge",
        "backend.pgsql.pool1.password = hookbridge",
        "backend.pgsql.pool1.database = mqtt",
        *(f"backend.pgsql.pool1.{key} = {value}" for key, value in settings.items()),
        "metrics.listener = off",
        "broker.listener.tcp = 127.0.0.1:0",
    ]
    return "\n".join(lines) + "\n"


async def through_runner(port: int, settings: dict[str, str], events: list[MessagePublish]) -> float:
    with tempfile.TemporaryDirectory(prefix="pgsql-bench-") as tmp:
        workdir = Path(tmp)
        (workdir / "rules").mkdir()
        (workdir / "rules" / "bench.conf").write_text(RULE)
        (workdir / "bridge.conf").write_text(bridge_config(port, settings))
        bridge = Bridge.load(Paths(workdir / "bridge.conf", workdir / "rules"))
        await bridge.start()
        try:
            started = time.perf_counter()
            await feed(bridge, events)
            await bridge.idle()
            elapsed = time.perf_counter() - started
        finally:
            await bridge.stop()
    return len(events) / elapsed


async def ceiling(conn: asyncpg.Connection, events: list[MessagePublish]) -> float:
    started = time.perf_counter()
    await conn.execute(INSERT_TOPICS, sorted({event.topic for event in events}))
    for start in range(0, len(events), CHUNK):
        records = [row(event) for event in events[start : start + CHUNK]]
        await conn.copy_records_to_table("mqtt_msg", records=records, columns=COLUMNS)
    return len(events) / (time.perf_counter() - started)


async def naive(conn: asyncpg.Connection, events: list[MessagePublish]) -> float:
    started = time.perf_counter()
    for event in events:
        await conn.execute(INSERT, *row(event))
    return len(events) / (time.perf_counter() - started)


async def server(conn: asyncpg.Connection) -> str:
    version = str(await conn.fetchval("SELECT version()")).split(", compiled by")[0]
    settings = [
        f"{name} {await conn.fetchval(f'SHOW {name}')}"
        for name in ("fsync", "synchronous_commit", "shared_buffers", "wal_buffers")
    ]
    return f"{version}; {', '.join(settings)}"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--naive-messages", type=int, default=5_000)
    parser.add_argument("--payload", type=int, default=200)
    parser.add_argument("--port", type=int, default=5439)
    parser.add_argument("--runs", type=int, default=5, help="rounds of the three methods; the median is shown")
    pool = parser.add_argument_group("runner pool settings (default: the bridge's defaults)")
    pool.add_argument("--batch-size", help="backend.pgsql.pool1.batch_size")
    pool.add_argument("--batch-time", help="backend.pgsql.pool1.batch_time, e.g. 5ms")
    pool.add_argument("--max-inflight", help="backend.pgsql.pool1.max_inflight")
    pool.add_argument("--pool-size", help="backend.pgsql.pool1.pool_size")
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
    conn = await asyncpg.connect(dsn(args.port))
    version = await server(conn)
    methods: list[tuple[str, Method | None, int]] = [
        ("hookbridge runner (on_message_publish)", None, args.messages),
        ("ceiling: asyncpg COPY, 10,000-row chunks (+ topics)", ceiling, args.messages),
        ("naive: one autocommitted INSERT per message", naive, args.naive_messages),
    ]
    rates: list[list[float]] = [[] for _ in methods]
    counts: list[tuple[int, int]] = [(0, 0)] * len(methods)
    wrong = []
    for _ in range(args.runs):  # rounds of all three, so a busy moment of the machine hits them alike
        for index, (name, run, count) in enumerate(methods):
            await fresh_tables(conn)
            batch = events[:count]
            rate = await through_runner(args.port, settings, batch) if run is None else await run(conn, batch)
            stored = await conn.fetchval("SELECT count(*) FROM mqtt_msg")
            topics = await conn.fetchval("SELECT count(*) FROM mqtt_topic")
            if stored != count:
                wrong.append(f"{name}: {stored} rows in mqtt_msg, expected {count}")
            rates[index].append(rate)
            counts[index] = (stored, topics)
    await fresh_tables(conn)
    await conn.close()
    medians = [statistics.median(runs) for runs in rates]
    results: list[tuple[str, ...]] = [
        (name, f"{count}", f"{median:,.0f}", ", ".join(f"{rate:,.0f}" for rate in runs), f"{stored}", f"{topics}")
        for (name, _, count), median, runs, (stored, topics) in zip(methods, medians, rates, counts, strict=True)
    ]
    pool = ", ".join(f"{key} {value}" for key, value in settings.items()) or "defaults"
    print(f"machine: {describe()}")
    print(f"server: {version}")
    print(f"payload {args.payload} B, {TOPICS} topics, expired_time {EXPIRED_TIME}, {args.runs} runs each")
    print(f"runner pool settings: {pool}")
    print("the ceiling also inserts the distinct topics into mqtt_topic, as the runner does; the naive way does not\n")
    print(table(results, ("method", "messages", "median msg/s", "runs", "mqtt_msg rows", "mqtt_topic rows")))
    runner_rate, ceiling_rate, naive_rate = medians
    share, factor = runner_rate / ceiling_rate, runner_rate / naive_rate
    print(
        f"\nrunner = {share:.0%} of the COPY ceiling (target >= 50%: {'met' if share >= 0.5 else 'NOT met'}), "
        f"{factor:.1f}x the naive way (target >= 20x: {'met' if factor >= 20 else 'NOT met'})"
    )
    for problem in wrong:
        print(f"WRONG ROW COUNT: {problem}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    arguments = parse_args()
    subprocess.run(["bash", "scripts/postgres.sh", str(arguments.port)], check=True, capture_output=True)
    sys.exit(asyncio.run(main(arguments)))
