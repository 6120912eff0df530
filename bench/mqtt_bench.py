"""End to end through Mosquitto: QoS 1 publish -> broker -> hookbridge (mqtt mode) -> Redis / PostgreSQL.

For each database, in the same run:
- hookbridge, `broker.mode = mqtt`, one `on_message_publish` rule: messages per second from the
  first publish to the last commit, as fast as the publishers go; then latency (publish to
  committed, p50 / p99) with the publishers paced at half that rate;
- the naive way a user would write it: a paho-mqtt subscriber (QoS 1) doing one write per
  message (Redis: HSET + ZADD + EXPIRE round trips with redis-py; PostgreSQL: one
  autocommitted INSERT, awaited, per message).

Publishers are `mosquitto_pub -l -q 1 -M 1000` processes (C, ~70k msg/s each here), one per
topic; each payload starts with its publish time in ns. The bridge runs in this process
(its commit hooks give the commit time of every message); Mosquitto, Redis and PostgreSQL
are the project's scripts' servers.

    .venv/bin/python -m bench.mqtt_bench [--db redis,pgsql] [--messages 100000] [--naive-messages 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import paho.mqtt.client as paho
import redis as redis_sync
from paho.mqtt.enums import CallbackAPIVersion

from actions.redis import keys
from bench import pgsql_bench
from bench.machine import describe, table
from bench.services import start_server
from bridge.app import Bridge, Paths
from bridge.backend import Job
from bridge.msgid import MsgIdGenerator

PUBLISHERS = 4
PAD = b"x" * 150


class Publishers:
    """`mosquitto_pub -l` processes, one per topic; lines are `<publish time ns>|<pad>`."""

    def __init__(self, port: int, prefix: str) -> None:
        self.procs = [
            subprocess.Popen(
                ["mosquitto_pub", "-p", str(port), "-q", "1", "-M", "1000", "-l", "-t", f"{prefix}/{k}"],
                stdin=subprocess.PIPE,
            )
            for k in range(PUBLISHERS)
        ]

    def send(self, total: int, rate: float | None) -> None:
        """Write `total` lines over the publishers, as fast as they take them or at `rate` msg/s."""
        per = total // PUBLISHERS

        def write(proc: subprocess.Popen[bytes]) -> None:
            assert proc.stdin is not None
            step = 200 if rate is None else max(1, int(rate / PUBLISHERS / 1000))  # lines per ms when paced
            started = time.perf_counter()
            for sent in range(0, per, step):
                n = min(step, per - sent)
                if rate is not None:
                    due = started + sent / (rate / PUBLISHERS)
                    delay = due - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                now = time.time_ns()
                proc.stdin.write(b"".join(b"%d|%s\n" % (now, PAD) for _ in range(n)))
                proc.stdin.flush()

        threads = [threading.Thread(target=write, args=(p,)) for p in self.procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def close(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(60)


class Commits:
    """A runner commit hook: counts committed publishes and their publish-to-commit latency."""

    def __init__(self) -> None:
        self.count = 0
        self.latencies: list[float] = []
        self.last = 0.0
        self.changed = asyncio.Event()

    def __call__(self, job: Job, outcome: BaseException | None) -> None:
        now = time.time_ns()
        payload = getattr(job.event, "payload", b"")
        self.latencies.append((now - int(payload.split(b"|", 1)[0])) / 1e6)
        self.count += 1
        self.last = time.perf_counter()
        self.changed.set()

    async def wait(self, count: int) -> None:
        async with asyncio.timeout(300):
            while self.count < count:
                self.changed.clear()
                await self.changed.wait()


def pool_lines(db: str, args: argparse.Namespace) -> str:
    if db == "redis":
        return f"backend.redis.pool1.server = 127.0.0.1:{args.redis_port}\n"
    return pgsql_bench.bridge_config(args.pg_port, {})


async def hookbridge(db: str, args: argparse.Namespace, workdir: Path) -> tuple[float, float, float, float]:
    """(msg/s, p50 ms, p99 ms, paced rate) for the bridge in mqtt mode."""
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    (workdir / "rules").mkdir(parents=True, exist_ok=True)
    (workdir / "rules" / "bench.conf").write_text(
        f'backend.{db}.hook.message.publish.1 = {{"topic": "{prefix}/#", '
        '"action": {"function": "on_message_publish"}, "expired_time": 3600}\n'
    )
    (workdir / "bridge.conf").write_text(
        "metrics.listener = off\nbroker.mode = mqtt\n"
        f"broker.server = 127.0.0.1:{args.mqtt_port}\nbroker.clientid = hb-{prefix}\nbroker.session_expiry = 2m\n"
        f"spool.dir = {workdir / 'state'}\n" + pool_lines(db, args)
    )
    bridge = Bridge.load(Paths(workdir / "bridge.conf", workdir / "rules"))
    await bridge.start()
    commits = Commits()
    for runner in bridge.runners.values():
        runner.commit_hooks.append(commits)
    try:
        await asyncio.sleep(0.5)  # SUBACK
        pubs = Publishers(args.mqtt_port, prefix)
        started = time.perf_counter()
        await asyncio.to_thread(pubs.send, args.messages, None)
        await commits.wait(args.messages)
        rate = args.messages / (commits.last - started)
        pubs.close()

        paced = rate / 2
        commits.latencies.clear()
        count = int(paced * args.latency_seconds) // PUBLISHERS * PUBLISHERS
        base = commits.count
        pubs = Publishers(args.mqtt_port, prefix)
        await asyncio.to_thread(pubs.send, count, paced)
        await commits.wait(base + count)
        pubs.close()
        lat = sorted(commits.latencies)
        p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
    finally:
        await bridge.stop()
    return rate, p50, p99, paced


def naive_subscriber(port: int, prefix: str, write: Callable[[bytes, bytes], None], total: int) -> float:
    """A paho QoS 1 subscriber writing each message before taking the next; returns msg/s."""
    done = threading.Event()
    state: dict[str, Any] = {"count": 0, "last": 0.0}

    def on_message(client: paho.Client, userdata: object, msg: paho.MQTTMessage) -> None:
        write(msg.topic.encode(), msg.payload)
        state["count"] += 1
        if state["count"] >= total:
            state["last"] = time.perf_counter()
            done.set()

    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"naive-{prefix}", protocol=paho.MQTTv311)
    client.on_message = on_message
    subscribed = threading.Event()
    client.on_subscribe = lambda *a: subscribed.set()
    client.connect("127.0.0.1", port)
    client.subscribe(f"{prefix}/#", 1)
    client.loop_start()
    subscribed.wait(10)
    pubs = Publishers(port, prefix)
    started = time.perf_counter()
    pubs.send(total, None)
    done.wait(600)
    pubs.close()
    client.disconnect()
    client.loop_stop()
    return total / (state["last"] - started)


def naive_redis(args: argparse.Namespace) -> float:
    r = redis_sync.Redis(port=args.redis_port, protocol=2)
    ids = MsgIdGenerator("naive")

    def write(topic: bytes, payload: bytes) -> None:
        msgid = ids.next()
        key = keys.message(msgid)
        r.hset(
            key, mapping={"id": msgid, "from": "", "qos": 1, "topic": topic, "payload": payload, "ts": int(time.time())}
        )
        r.zadd(keys.topic_list(topic.decode()), {msgid: keys.score(msgid)})
        r.expire(key, 3600)

    try:
        return naive_subscriber(args.mqtt_port, f"naive{uuid.uuid4().hex[:6]}", write, args.naive_messages)
    finally:
        r.close()


def naive_pgsql(args: argparse.Namespace) -> float:
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(asyncpg.connect(pgsql_bench.dsn(args.pg_port)))
    ids = MsgIdGenerator("naive")
    from bridge.events import MessagePublish

    def write(topic: bytes, payload: bytes) -> None:
        event = MessagePublish(ids.next(), "", None, topic.decode(), 1, payload, False, "n", "", time.time())
        loop.run_until_complete(conn.execute(pgsql_bench.INSERT, *pgsql_bench.row(event)))

    try:
        return naive_subscriber(args.mqtt_port, f"naive{uuid.uuid4().hex[:6]}", write, args.naive_messages)
    finally:
        loop.run_until_complete(conn.close())
        loop.close()


def mosquitto_version() -> str:
    return subprocess.run(["mosquitto", "-h"], capture_output=True, text=True).stdout.splitlines()[0]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", default="redis,pgsql")
    parser.add_argument("--messages", type=int, default=100_000, help="a multiple of 4 (one share per publisher)")
    parser.add_argument("--naive-messages", type=int, default=20_000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--mqtt-port", type=int, default=1886)
    parser.add_argument("--redis-port", type=int, default=6396)
    parser.add_argument("--pg-port", type=int, default=5443)  # its own server: the bench drops tables
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    start_server("mosquitto.sh", args.mqtt_port)
    version = mosquitto_version()
    print(f"machine: {describe()}; {version}")
    rows = []
    for db in args.db.split(","):
        if db == "redis":
            start_server("redis.sh", args.redis_port)
            redis_sync.Redis(port=args.redis_port).flushall()
        else:
            start_server("postgres.sh", args.pg_port)
            conn = await asyncpg.connect(pgsql_bench.dsn(args.pg_port))
            await pgsql_bench.fresh_tables(conn)
            await conn.close()
        with tempfile.TemporaryDirectory(prefix="mqtt-bench-") as tmp:
            rate, p50, p99, paced = await hookbridge(db, args, Path(tmp))
        naive = await asyncio.to_thread(naive_redis if db == "redis" else naive_pgsql, args)
        rows.append(
            (
                db,
                f"{rate:,.0f}",
                f"{paced:,.0f}",
                f"{p50:.1f}",
                f"{p99:.1f}",
                f"{naive:,.0f}",
                f"{rate / naive:.1f}x",
            )
        )
    header = ("database", "hookbridge msg/s", "paced at msg/s", "p50 ms", "p99 ms", "naive paho msg/s", "ratio")
    print(table(rows, header))
    print(
        f"messages: {args.messages:,} (hookbridge), {args.naive_messages:,} (naive); QoS 1; {len(PAD) + 20} B payloads"
    )


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
