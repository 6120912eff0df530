"""Messages per second persisted into Cassandra by on_message_publish, through the runner.

Compared in the same run, on the same generated events, with a hand-written baseline: the
driver's own `execute_concurrent_with_args` of the same prepared INSERT into `msg` (one row per
message, `concurrency` requests in flight, the pool's `concurrency` setting), as a script that
knows the driver would write them. Every method starts from an emptied `msg` table.

    .venv/bin/python -m bench.cassa_bench [--messages 50000] [--runs 3] [--port 9042]
        [--batch-size N] [--max-inflight N] [--concurrency N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster, Session
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

from actions.cassa import schema
from actions.cassa.functions import STATEMENTS, bucket_of, when
from bench.feed import feed, make_events
from bench.machine import describe, table
from bridge.app import Bridge, Paths
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
    lines = [
        f"backend.cassa.pool1.nodes = 127.0.0.1:{port}",
        f"backend.cassa.pool1.keyspace = {KEYSPACE}",
        "backend.cassa.pool1.username = hookbridge",
        "backend.cassa.pool1.password = hookbridge",
        *(f"backend.cassa.pool1.{key} = {value}" for key, value in settings.items()),
        "metrics.listener = off",
        "broker.listener.tcp = 127.0.0.1:0",
    ]
    return "\n".join(lines) + "\n"


async def through_runner(port: int, settings: dict[str, str], events: list[MessagePublish]) -> float:
    with tempfile.TemporaryDirectory(prefix="cassa-bench-") as tmp:
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--payload", type=int, default=200)
    parser.add_argument("--port", type=int, default=9042)
    parser.add_argument("--runs", type=int, default=3, help="rounds of both methods; the median is shown")
    pool = parser.add_argument_group("runner pool settings (default: the bridge's defaults)")
    pool.add_argument("--batch-size", help="backend.cassa.pool1.batch_size")
    pool.add_argument("--max-inflight", help="backend.cassa.pool1.max_inflight")
    pool.add_argument("--concurrency", type=int, default=256, help="requests in flight, both methods")
    return parser.parse_args()


async def main(args: argparse.Namespace) -> int:
    settings = {
        key: str(value)
        for key, value in (
            ("batch_size", args.batch_size),
            ("max_inflight", args.max_inflight),
            ("concurrency", args.concurrency),
        )
        if value is not None
    }
    events = make_events(args.messages, args.payload, TOPICS)
    cluster, session = connect(args.port)
    version = session.execute("SELECT release_version FROM system.local").one()[0]
    names = ["hookbridge runner (on_message_publish)", "hand-written: execute_concurrent_with_args, same INSERT"]
    rates: list[list[float]] = [[], []]
    wrong = []
    for _ in range(args.runs):  # rounds of both, so a busy moment of the machine hits them alike
        for index, name in enumerate(names):
            empty(session)
            if index == 0:
                rate = await through_runner(args.port, settings, events)
            else:
                rate = await asyncio.to_thread(hand_written, session, events, args.concurrency)
            stored = session.execute(f"SELECT count(*) FROM {KEYSPACE}.msg", timeout=120).one()[0]
            if stored != len(events):
                wrong.append(f"{name}: {stored} rows in msg, expected {len(events)}")
            rates[index].append(rate)
    empty(session)
    cluster.shutdown()
    medians = [statistics.median(runs) for runs in rates]
    results = [
        (name, f"{len(events)}", f"{median:,.0f}", ", ".join(f"{rate:,.0f}" for rate in runs))
        for name, median, runs in zip(names, medians, rates, strict=True)
    ]
    print(f"machine: {describe()}")
    print(f"server: Cassandra {version}, single node on this machine (1 GB heap, scripts/cassandra.sh)")
    print(f"payload {args.payload} B, {TOPICS} topics, expired_time {EXPIRED_TIME}, {args.runs} runs each")
    print(f"runner pool settings: {', '.join(f'{k} {v}' for k, v in settings.items())}\n")
    print(table(results, ("method", "messages", "median msg/s", "runs")))
    share = medians[0] / medians[1]
    print(f"\nrunner = {share:.0%} of execute_concurrent (target >= 50%: {'met' if share >= 0.5 else 'NOT met'})")
    for problem in wrong:
        print(f"WRONG ROW COUNT: {problem}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    arguments = parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)
    subprocess.run(["bash", "scripts/cassandra.sh", str(arguments.port)], check=True, capture_output=True)
    sys.exit(asyncio.run(main(arguments)))
