"""The reconnect storm bench (bench/reconnect_storm.py) runs whole at its --quick size, and what it
reports is what happened: every device of every storm got its CONNACK (the bench fails a run
otherwise), and in the durable storm every queued message reached its device once, in order,
after the broker's restart (bench/storm_device.py fails a run on a missing, doubled
or foreign message). No figure is judged: timing never decides a test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.reconnect_storm import QUICK

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_connects_every_device_and_delivers_every_queued_message_once(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.reconnect_storm",
            "--quick",
            "--json",
            str(out),
            # a third row, the embedded broker on the event loop's transport
            "--variant",
            "broker.listener.tcp.transport = loop",
            # a fourth: each restored queue read back when its device returns, not all at start
            "--variant",
            "broker.durable_preload = 0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    runs = {
        f"{kind}-{auth}-{broker}"
        for kind in ("clean", "durable")
        for auth in ("anon", "auth")
        for broker in ("mosquitto", "embedded", "embedded-variant1", "embedded-variant2")
    }
    assert set(results) == runs
    for key, found in results.items():
        assert found["clients"] == QUICK["clients"], key
        assert 0 < found["connected"] <= found["complete"], key
        queued = QUICK["clients"] * QUICK["queued"] if key.startswith("durable") else 0
        assert found["delivered"] == queued, key
        assert (found["restart"] > 0) == key.startswith("durable"), key
    assert "machine: " in done.stdout
    assert "embedded, broker.listener.tcp.transport = loop" in done.stdout
    assert "embedded, broker.durable_preload = 0" in done.stdout
