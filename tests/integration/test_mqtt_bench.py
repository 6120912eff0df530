"""The external-broker benchmark (bench/mqtt_bench.py) runs whole at tiny message counts against
the real Mosquitto, Redis and PostgreSQL of the project's scripts: every row of both tables is
measured, every subscriber (the bridge as a process with 1 and N workers, the gmqtt sketch, the
naive paho script) stored every published message exactly once, read back from the database,
and each got a latency from the database's own commit events. No figure is judged: timing never
decides a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.mqtt_report import ROWS
from bench.mqtt_subscribers import workers_supported

ROOT = Path(__file__).resolve().parents[2]
SUBSCRIBERS = ("bridge", "workers", "sketch", "naive")
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
