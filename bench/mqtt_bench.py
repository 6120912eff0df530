"""End to end through Mosquitto: QoS 1 publish -> broker -> subscriber -> Redis / PostgreSQL.

One run prints, for each database, one table of these configurations, each on a fresh database
(FLUSHALL / mqtt_* tables dropped and created) with fresh topics and client ids:
1. Mosquitto publish-only: the same publishers with nobody subscribed (the machine's ceiling);
2. hookbridge, `broker.mode = mqtt`, one `on_message_publish` rule: `python -m bridge run -c ...
   -r ...` as a user starts it;
3. the same with `--workers N` (default: the machine's cores) and `broker.shared_group` set;
4. the hand-tuned sketch (bench/mqtt_sketch.py): gmqtt, PUBACK on receipt, the bridge's writes
   pipelined per batch; the baseline of the workers' target (N workers >= 1.3x this; docs/benchmarks.md#results);
5. the naive paho subscriber (bench/mqtt_naive.py), one write per message, fewer messages.

Publishers: `mosquitto_pub -l -q 1 -M 1000` processes, one topic each (four reach about 58,000
msg/s into Mosquitto with nobody subscribed, on 2 cores). Each payload is
`<publish time ns>|<sequence number>|<150 B pad>`.

Every subscriber runs as its own process, so everything is measured from outside it:
- msg/s: from the first publish to the first poll of the database that finds all messages stored
  (Redis: ZCARD of the bench topics' lists every 10 ms; PostgreSQL: every 20 ms, the row counts
  a statement trigger keeps per topic, see bench/mqtt_stores.py);
- CPU µs per message: user + system time of the subscriber's process tree (/proc/<pid>/stat of it
  and its children) over that phase, and of Mosquitto when this checkout's script started it;
- p50 / p99: publish to commit with the publishers paced at half of that row's measured rate for
  --latency-seconds; commit times come from Redis keyspace notifications / a PostgreSQL
  statement trigger's NOTIFY, installed for this phase only (bench/mqtt_stores.py says how);
- exactly once: after the subscriber stopped (SIGTERM), every published sequence number must be
  stored once, read back from the bench topics. The script exits 1 when a bridge row fails it.

    .venv/bin/python -m bench.mqtt_bench [--db redis,pgsql] [--messages 100000]
        [--naive-messages 20000] [--workers N] [--latency-seconds 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from bench import mqtt_subscribers as subscribers
from bench import pgsql_bench
from bench.machine import busy_seconds, cpu_ticks, describe, steal_since
from bench.mqtt_publish import PAD, Publishers, probe
from bench.mqtt_report import ROWS, Row, percentiles, report, verdict
from bench.mqtt_stores import PgsqlStore, RedisStore, Store
from bench.mqtt_subscribers import Servers, Subscriber, cpu_seconds, database_pid, mosquitto_pid
from bench.services import start_server

READY_TIMEOUT = 60.0  # seconds for a subscriber to start storing the probe
POLL = {"redis": 0.01, "pgsql": 0.02}  # seconds between counts


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", default="redis,pgsql")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--naive-messages", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="bridge processes of row 3")
    parser.add_argument(
        "--pool-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the bridge's pool, e.g. batch_time=0 (repeatable; rows 2 and 3)",
    )
    parser.add_argument("--publishers", type=int, default=4)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--stall", type=float, default=30.0, help="seconds without a new message stored: give up")
    parser.add_argument("--mqtt-port", type=int, default=1886)
    parser.add_argument("--redis-port", type=int, default=6396)
    parser.add_argument("--pg-port", type=int, default=5443)  # its own server: the bench drops tables
    parser.add_argument("--only", default=",".join(ROWS), help="rows to run, of " + ",".join(ROWS))
    parser.add_argument("--json", help="also write the rows to this file")
    return parser.parse_args()


def broker_cpu(port: int) -> float | None:
    """Mosquitto's CPU seconds so far (None when another checkout's broker answers on the port)."""
    pid = mosquitto_pid(port)
    return cpu_seconds(pid) if pid else None


def database_cpu(db: str, args: argparse.Namespace) -> float | None:
    """The database server's CPU seconds so far (None when another checkout's server answers)."""
    pid = database_pid(db, args.redis_port if db == "redis" else args.pg_port)
    return cpu_seconds(pid) if pid else None


def per_message(before: float | None, after: float | None, messages: int) -> float | None:
    """CPU µs per message between two readings."""
    return None if before is None or after is None else (after - before) / messages * 1e6


async def wait_stored(
    store: Store, topics: list[str], expected: int, sub: Subscriber, args: argparse.Namespace
) -> tuple[float, int]:
    """Poll the count until `expected` messages are stored: (the time of that poll, the count);
    fewer when the count stalls for --stall seconds or the subscriber exits."""
    last, changed = -1, time.perf_counter()
    while True:
        count = await store.count(topics)
        now = time.perf_counter()
        if count >= expected:
            return now, count
        if count != last:
            last, changed = count, now
        elif now - changed > args.stall or not sub.running():
            return now, count
        await asyncio.sleep(POLL[store.name])


async def wait_ready(store: Store, sub: Subscriber, prefix: str, args: argparse.Namespace) -> None:
    """Publish probes on `<prefix>/probe` until one is stored: the subscription is in place."""
    deadline = time.perf_counter() + READY_TIMEOUT
    while time.perf_counter() < deadline:
        if not sub.running():
            raise RuntimeError(f"the subscriber exited with {sub.proc.returncode}:\n{sub.tail()}")
        await asyncio.to_thread(probe, args.mqtt_port, f"{prefix}/probe")
        for _ in range(50):
            if await store.count([f"{prefix}/probe"]):
                return
            await asyncio.sleep(0.02)
    raise RuntimeError(f"the subscriber stored no probe within {READY_TIMEOUT:.0f} s:\n{sub.tail()}")


async def publish_only(args: argparse.Namespace) -> Row:
    row = Row("ceiling", "Mosquitto publish-only (nobody subscribed)", args.messages)
    pubs = Publishers(args.mqtt_port, f"p{uuid.uuid4().hex[:8]}", args.publishers)
    before, machine, started = broker_cpu(args.mqtt_port), busy_seconds(), time.perf_counter()
    await asyncio.to_thread(pubs.send, range(args.messages), None)
    await asyncio.to_thread(pubs.close)
    row.rate = args.messages / (time.perf_counter() - started)
    row.broker_us = per_message(before, broker_cpu(args.mqtt_port), args.messages)
    row.machine_us = per_message(machine, busy_seconds(), args.messages)
    return row


async def measure(row: Row, store: Store, sub: Subscriber, pubs: Publishers, args: argparse.Namespace) -> range:
    """Throughput, then latency at half of it, into `row`; the sequence numbers published."""
    cpu, broker, started = sub.cpu(), broker_cpu(args.mqtt_port), time.perf_counter()
    database, machine = database_cpu(store.name, args), busy_seconds()
    sending = asyncio.create_task(asyncio.to_thread(pubs.send, range(row.messages), None))
    end, count = await wait_stored(store, pubs.topics, row.messages, sub, args)
    row.cpu_us = per_message(cpu, sub.cpu(), row.messages)
    row.broker_us = per_message(broker, broker_cpu(args.mqtt_port), row.messages)
    row.database_us = per_message(database, database_cpu(store.name, args), row.messages)
    row.machine_us = per_message(machine, busy_seconds(), row.messages)
    await sending
    if count < row.messages:
        row.note = f"stopped at {count} of {row.messages} stored"
        return range(row.messages)
    row.rate = row.messages / (end - started)
    row.paced = row.rate / 2
    paced = range(row.messages, row.messages + max(len(pubs.procs), int(row.paced * args.latency_seconds)))
    await store.watch()
    await asyncio.to_thread(pubs.send, paced, row.paced)
    _, count = await wait_stored(store, pubs.topics, paced.stop, sub, args)
    found = percentiles(await store.commits(len(paced)), paced)
    if found:
        row.p50, row.p99 = found
    if count < paced.stop:
        row.note = f"stopped at {count} of {paced.stop} stored"
    return range(paced.stop)


Command = Callable[[str, Path], list[str]]  # (topic prefix, work directory) -> the subscriber's command line


async def subscriber_row(
    key: str, name: str, messages: int, store: Store, command: Command, args: argparse.Namespace
) -> Row:
    """One subscriber from a fresh database: measured, stopped, its stored messages checked."""
    row, prefix = Row(key, name, messages), f"b{uuid.uuid4().hex[:8]}"
    await store.fresh()
    with tempfile.TemporaryDirectory(prefix="mqtt-bench-") as tmp:
        sub = Subscriber(command(prefix, Path(tmp)), Path(tmp) / "subscriber.log")
        pubs = Publishers(args.mqtt_port, prefix, args.publishers)
        try:
            await wait_ready(store, sub, prefix, args)
            published = await measure(row, store, sub, pubs, args)
        except RuntimeError as exc:
            row.note, published = str(exc).splitlines()[0], range(messages)
            print(f"{name}: {exc}", file=sys.stderr)
        finally:
            await asyncio.to_thread(pubs.close)
            code = sub.stop()
            if code not in (0, -15):
                print(f"{name}: exited with {code}:\n{sub.tail()}", file=sys.stderr)
    row.verdict, row.exactly_once = verdict(await store.payloads(pubs.topics), published)
    return row


async def table_for(db: str, store: Store, args: argparse.Namespace) -> list[Row]:
    """The rows of --only, in ROWS order."""
    servers = Servers(args.mqtt_port, args.redis_port, args.pg_port)
    commands: dict[str, tuple[str, int, Command]] = {
        "bridge": (
            "hookbridge mqtt mode, 1 worker",
            args.messages,
            lambda prefix, tmp: subscribers.bridge(db, servers, tmp, prefix, None, args.pool_setting),
        ),
        "workers": (
            f"hookbridge mqtt mode, {args.workers} workers",
            args.messages,
            lambda prefix, tmp: subscribers.bridge(db, servers, tmp, prefix, args.workers, args.pool_setting),
        ),
        "sketch": (
            "sketch: gmqtt, PUBACK on receipt, pipelined",
            args.messages,
            lambda prefix, _: subscribers.sketch(db, servers, prefix),
        ),
        "naive": (
            "naive: paho, one write per message",
            args.naive_messages,
            lambda prefix, _: subscribers.naive(db, servers, prefix),
        ),
    }
    rows = []
    for key in (key for key in ROWS if key in args.only.split(",")):
        if key == "ceiling":
            rows.append(await publish_only(args))
        elif key == "workers" and not subscribers.workers_supported():
            name = commands[key][0]
            rows.append(Row(key, name, 0, note="skipped: this checkout's `hookbridge run` has no --workers"))
        else:
            name, messages, command = commands[key]
            rows.append(await subscriber_row(key, name, messages, store, command, args))
    return rows


def mosquitto_version() -> str:
    return subprocess.run(["mosquitto", "-h"], capture_output=True, text=True, check=False).stdout.splitlines()[0]


def save(path: Path, results: dict[str, list[dict[str, object]]]) -> None:
    path.write_text(json.dumps(results))


async def open_store(db: str, args: argparse.Namespace) -> tuple[Store, str]:
    """The database's store and a line describing its server."""
    if db == "redis":
        start_server("redis.sh", args.redis_port)
        return RedisStore(args.redis_port), ""
    start_server("postgres.sh", args.pg_port)
    store = await PgsqlStore.connect(args.pg_port)
    return store, f"server: {await pgsql_bench.server(store.conn)}"


async def main(args: argparse.Namespace) -> int:
    args.messages -= args.messages % args.publishers
    start_server("mosquitto.sh", args.mqtt_port)
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"machine: {describe()}; {mosquitto_version()}; load average {load} (before the run)")
    print(
        f"{args.publishers} mosquitto_pub -l -q 1 -M 1000 publishers, {len(PAD) + 30} B payloads, QoS 1; "
        f"latency paced at half each row's rate for {args.latency_seconds:g} s\n"
    )
    results: dict[str, list[dict[str, object]]] = {}
    failed: list[str] = []
    ticks = cpu_ticks()
    for db in args.db.split(","):
        store, server = await open_store(db, args)
        try:
            rows = await table_for(db, store, args)
        finally:
            await store.close()
        if server:
            print(server)
        report(db, rows)
        results[db] = [asdict(row) for row in rows]
        failed += [
            f"{db}: {row.name}: {row.verdict}"
            for row in rows
            if row.key in ("bridge", "workers") and not row.exactly_once
        ]
    print(steal_since(ticks))
    if args.json:
        save(Path(args.json), results)
    for problem in failed:
        print(f"NOT EXACTLY ONCE: {problem}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
