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
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bson.int64 import Int64
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from actions.mongo.backend import MongoBackend
from actions.mongo.functions import message_document
from bench.persistence import (
    CEILING_WRITES_TOPICS,
    Database,
    Method,
    bench_main,
    compare,
    events_for,
    load_bridge,
    pool_config,
    pool_settings,
)
from bridge.backend import FunctionContext, Job
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


def bridge_config(port: int, settings: dict[str, str]) -> str:
    return pool_config("mongo", settings, server=f"127.0.0.1:{port}", database="bench")


async def fresh_database(client: AsyncMongoClient[dict[str, Any]], port: int) -> None:
    """Drop the database, then create the collections and indexes as the bridge does."""
    await client.drop_database("bench")
    with tempfile.TemporaryDirectory(prefix="mongo-bench-") as tmp:
        path = Path(tmp) / "bridge.conf"
        path.write_text(bridge_config(port, {}))
        config = load_config(path)
    backend = MongoBackend(config.pools["mongo.pool1"], FunctionContext(node="bench"))
    await backend.connect()
    await backend.close()


def same_documents(event: MessagePublish, port: int) -> bool:
    """The hand-written document is the one the backend builds (so both store the same)."""
    with tempfile.TemporaryDirectory(prefix="mongo-bench-") as tmp:
        rule: Rule = load_bridge(Path(tmp), bridge_config(port, {}), RULE).engine.rules[0]
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


async def main(args: argparse.Namespace) -> int:
    settings = pool_settings(args)
    events = events_for(args, TOPICS)
    if not same_documents(events[0], args.port):
        print("the hand-written document differs from the backend's: fix hand_written()", file=sys.stderr)
        return 1
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        f"mongodb://127.0.0.1:{args.port}/?directConnection=true"
    )
    bench = client.bench

    async def stored() -> tuple[int, int]:
        return await bench.mqtt_msg.count_documents({}), await bench.mqtt_topic.count_documents({})

    db = Database(
        bridge_config(args.port, settings),
        settings,
        RULE,
        TOPICS,
        EXPIRED_TIME,
        f"{await server(client)}, on this machine",
        lambda: fresh_database(client, args.port),
        stored,
        unit="document",
    )
    try:
        return await compare(
            args,
            db,
            events,
            Method(
                "ceiling: insert_many(ordered=True), 10,000-doc chunks (+ topics)",
                args.messages,
                lambda n: ceiling(bench, events[:n]),
            ),
            Method(
                "naive: one awaited insert_one per message", args.naive_messages, lambda n: naive(bench, events[:n])
            ),
            ceiling_name="insert_many",
            notes=[CEILING_WRITES_TOPICS],
        )
    finally:
        await client.drop_database("bench")
        await client.close()


if __name__ == "__main__":
    bench_main("mongo", 27018, 2_000, "ferretdb.sh", main)
