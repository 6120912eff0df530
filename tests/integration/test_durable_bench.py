"""The durable sessions benchmark (bench/durable_bench.py) runs whole at its --quick sizes, and what
it measures is what it says: every throughput run delivered every message to every persistent
subscriber (publish_through fails otherwise), every restarted session came back with session
present 1 and all its messages (bench/mqtt_clients.reconnect fails otherwise), and the store
counts each message once however many offline sessions wait for it. No figure is judged: timing
never decides a test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.durable_bench import QUICK

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_measures_every_part(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.durable_bench", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    fanout = QUICK["subscribers"]
    for broker in ("mosquitto", "off", "on"):
        assert results[f"{broker}_1_msgs"] > 0
        assert results[f"{broker}_{fanout}_msgs"] > 0
    # Each message is one row of the durable log, whether one session or ten wait for it.
    assert results["disk_on_1_stored"] == QUICK["disk_messages"]
    assert results[f"disk_on_{fanout}_stored"] == QUICK["disk_messages"]
    assert 0 < results[f"disk_on_{fanout}_stopped"] < 2 * results["disk_on_1_stopped"]
    assert results["restart_on_stored"] == QUICK["stored"]
    assert "session present 1" in done.stdout
    assert "machine: " in done.stdout
