"""Messages per second persisted into Cassandra by on_message_publish, through the runner.

Compared in the same run, on the same generated events, with the ceiling: the driver's own
`execute_concurrent_with_args` of the same prepared INSERT into `msg` (one row per message, 256
requests in flight, the pool's default `concurrency`), as a script that knows the driver would
write them; and the naive way, one synchronous `execute` per message. Every method starts from
emptied tables.

    .venv/bin/python -m bench.cassa_bench [--messages 50000] [--runs 5] [--port 9042]
        [--batch-size N] [--batch-time 5ms] [--max-inflight N] [--pool-size N] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import warnings

from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster, Session
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

from actions.cassa import schema
from actions.cassa.functions import STATEMENTS, bucket_of, when
from bench.persistence import Database, Method, bench_main, compare, events_for, pool_config, pool_settings
from bridge.events import MessagePublish

KEYSPACE = "mqtt_bench"
EXPIRED_TIME = 3600
TOPICS = 100
RULE = (
    'backend.cassa.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}, '
    f'"expired_time": {EXPIRED_TIME}}}\n'
)


def connect(port: int) -> tuple[Cluster, Session]:
    cluster = Cluster(
        ["127.0.0.1"],
        port=port,
        auth_provider=PlainTextAuthProvider("hookbridge", "hookbridge"),
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc="datacenter1")),
        protocol_version=5,
    )
    session = cluster.connect()
    for statement in schema.statements(KEYSPACE, {"class": "SimpleStrategy", "replication_factor": 1}):
        session.execute(statement)
    return cluster, session


def empty(session: Session) -> None:
    for table_name in ("msg", "msg_bucket", "topic"):
        session.execute(f"TRUNCATE {KEYSPACE}.{table_name}", timeout=60)


def bridge_config(port: int, settings: dict[str, str]) -> str:
    base = {"nodes": f"127.0.0.1:{port}", "keyspace": KEYSPACE, "username": "hookbridge", "password": "hookbridge"}
    return pool_config("cassa", settings, **base)


def hand_written(session: Session, events: list[MessagePublish], concurrency: int) -> float:
    insert = session.prepare(STATEMENTS["store"].format(ks=KEYSPACE))
    started = time.perf_counter()
    rows = [
        (e.topic, bucket_of(e.msgid), e.msgid, e.clientid, e.qos, e.retain, e.payload, when(e.timestamp), EXPIRED_TIME)
        for e in events
    ]
    results = execute_concurrent_with_args(session, insert, rows, concurrency=concurrency, raise_on_first_error=True)
    assert all(ok for ok, _ in results)
    return len(events) / (time.perf_counter() - started)


def naive(session: Session, events: list[MessagePublish]) -> float:
    """One synchronous execute per message, as a subscriber script would write them."""
    insert = session.prepare(STATEMENTS["store"].format(ks=KEYSPACE))
    started = time.perf_counter()
    for e in events:
        row = (e.topic, bucket_of(e.msgid), e.msgid, e.clientid, e.qos, e.retain, e.payload, when(e.timestamp))
        session.execute(insert, (*row, EXPIRED_TIME))
    return len(events) / (time.perf_counter() - started)


def stored(session: Session) -> tuple[int, int]:
    messages = session.execute(f"SELECT count(*) FROM {KEYSPACE}.msg", timeout=120).one()[0]
    topics = session.execute(f"SELECT count(*) FROM {KEYSPACE}.topic", timeout=120).one()[0]
    return int(messages), int(topics)


async def main(args: argparse.Namespace) -> int:
    settings = {"concurrency": "256", **pool_settings(args)}
    events = events_for(args, TOPICS)
    cluster, session = connect(args.port)
    version = session.execute("SELECT release_version FROM system.local").one()[0]
    concurrency = int(settings["concurrency"])

    async def fresh() -> None:
        await asyncio.to_thread(empty, session)

    db = Database(
        bridge_config(args.port, settings),
        settings,
        RULE,
        TOPICS,
        EXPIRED_TIME,
        f"Cassandra {version}, single node on this machine (1 GB heap, scripts/cassandra.sh)",
        fresh,
        lambda: asyncio.to_thread(stored, session),
    )
    try:
        return await compare(
            args,
            db,
            events,
            Method(
                f"ceiling: execute_concurrent_with_args, same INSERT, {concurrency} in flight",
                args.messages,
                lambda n: asyncio.to_thread(hand_written, session, events[:n], concurrency),
            ),
            Method(
                "naive: one synchronous execute per message",
                args.naive_messages,
                lambda n: asyncio.to_thread(naive, session, events[:n]),
            ),
            ceiling_name="execute_concurrent",
            notes=["the runner also writes the topic and bucket index rows; the other two write msg only"],
        )
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    warnings.simplefilter("ignore", DeprecationWarning)
    bench_main("cassa", 9042, 2_000, "cassandra.sh", main)
