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
import datetime as dt
import time
from typing import Any

import asyncpg

from actions.pgsql.functions import when
from actions.pgsql.schema import SCHEMA
from bench.persistence import (
    CEILING_WRITES_TOPICS,
    Database,
    Method,
    bench_main,
    compare,
    events_for,
    pool_config,
    pool_settings,
)
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
    return pool_config(
        "pgsql", settings, server=f"127.0.0.1:{port}", username="hookbridge", password="hookbridge", database="mqtt"
    )


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


async def main(args: argparse.Namespace) -> int:
    settings = pool_settings(args)
    events = events_for(args, TOPICS)
    conn = await asyncpg.connect(dsn(args.port))

    async def stored() -> tuple[int, int]:
        messages = await conn.fetchval("SELECT count(*) FROM mqtt_msg")
        return messages, await conn.fetchval("SELECT count(*) FROM mqtt_topic")

    db = Database(
        bridge_config(args.port, settings),
        settings,
        RULE,
        TOPICS,
        EXPIRED_TIME,
        await server(conn),
        lambda: fresh_tables(conn),
        stored,
    )
    try:
        return await compare(
            args,
            db,
            events,
            Method(
                "ceiling: asyncpg COPY, 10,000-row chunks (+ topics)",
                args.messages,
                lambda n: ceiling(conn, events[:n]),
            ),
            Method(
                "naive: one autocommitted INSERT per message", args.naive_messages, lambda n: naive(conn, events[:n])
            ),
            ceiling_name="COPY",
            notes=[CEILING_WRITES_TOPICS],
            naive_target=20,
        )
    finally:
        await conn.close()


if __name__ == "__main__":
    bench_main("pgsql", 5439, 5_000, "postgres.sh", main)
