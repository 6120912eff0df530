"""The external-broker benchmark (bench/mqtt_bench.py) runs whole at tiny message counts against
the real Mosquitto, Redis and PostgreSQL of the project's scripts: every row of both tables is
measured, every subscriber (the bridge as a process with 1 and N workers, the gmqtt sketch, the
naive paho script) stored every published message exactly once, read back from the database,
and each got a latency from the database's own commit events; and the read-back behind that
verdict sees a message stored twice and one lost in the real databases. No figure is judged:
timing never decides a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import pgsql_bench
from bench.mqtt_publish import PAD
from bench.mqtt_report import ROWS, verdict
from bench.mqtt_sketch import pgsql_writer, redis_writer
from bench.mqtt_stores import PgsqlStore, RedisStore, Store
from bench.mqtt_subscribers import workers_supported
from bench.services import start_server

ROOT = Path(__file__).resolve().parents[2]
SUBSCRIBERS = ("bridge", "workers", "sketch", "naive")
REDIS_PORT, PG_PORT = 6396, 5443  # bench.mqtt_bench's defaults
BENCH = (sys.executable, "-m", "bench.mqtt_bench", "--workers", "2")


def test_tiny_run_measures_every_row_and_finds_every_message_once(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [*BENCH, "--messages", "400", "--naive-messages", "100", "--latency-seconds", "0.5", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "machine: " in done.stdout
    assert "mosquitto version" in done.stdout
    results = json.loads(out.read_text())
    assert sorted(results) == ["pgsql", "redis"]
    for db, rows in results.items():
        by_key = {row["key"]: row for row in rows}
        assert tuple(by_key) == ROWS, db
        assert by_key["ceiling"]["rate"] > 0
        measured = SUBSCRIBERS if workers_supported() else tuple(k for k in SUBSCRIBERS if k != "workers")
        for key in measured:
            row = by_key[key]
            assert row["verdict"] == "exactly once", (db, row)
            assert row["note"] == "", (db, row)
            assert row["rate"] > 0
            assert row["p50"] is not None and row["p99"] >= row["p50"], (db, row)
            assert f"| {row['name']} " in done.stdout
        if not workers_supported():
            assert by_key["workers"]["note"].startswith("skipped: "), db


def payload(seq: int) -> bytes:
    return b"%d|%d|%s" % (1_000_000_000, seq, PAD)


async def open_store(db: str) -> Store:
    """The bench's own server for `db` (the bench empties it), emptied."""
    if db == "redis":
        start_server("redis.sh", REDIS_PORT)
        store: Store = RedisStore(REDIS_PORT)
    else:
        start_server("postgres.sh", PG_PORT)
        store = await PgsqlStore.connect(PG_PORT)
    await store.fresh()
    return store


@pytest.mark.parametrize("db", ["redis", "pgsql"])
async def test_the_read_back_catches_a_message_stored_twice_and_one_lost(db: str) -> None:
    """The sketch's own writer stores message 1 twice and never message 2: the bench's count and
    read-back of the real database see both, so its verdict cannot pass a subscriber that did this."""
    store = await open_store(db)
    target = f"127.0.0.1:{REDIS_PORT}" if db == "redis" else pgsql_bench.dsn(PG_PORT)
    write, close = await (redis_writer if db == "redis" else pgsql_writer)(target, 3600)
    try:
        await write([("t/0", payload(0)), ("t/1", payload(1))])
        await write([("t/1", payload(1)), ("t/probe", b"probe")])
        assert await store.count(["t/0", "t/1"]) == 3
        assert verdict(await store.payloads(["t/0", "t/1"]), range(3)) == ("1 lost, 1 extra", False)
    finally:
        await close()
        await store.close()
