"""The queued-bytes bench (bench/queued_bound.py) runs whole at its --quick size (200 sessions, a
16MB bound), and what it measures is what it says: the drops it reports are what the bound
requires, exactly (every message counted the same, the queues hold what fits in the bound and
no more), and /metrics counts them under `queued_bytes` and in dropped_messages alike. No time
is judged; memory only loosely (RSS over the idle sessions under 3 times the bound: the measured
factor is 1.2 to 1.9, docs/operations.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bridge.brokers.embedded.sessions import MESSAGE_OVERHEAD

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_drops_exactly_what_the_bound_requires(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.queued_bound", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    bound, size = 16 << 20, len("qb/000000") + 1000 + MESSAGE_OVERHEAD
    assert results["dropped"] == results["messages"] - bound // size
    assert 0 < results["rss_peak"] - results["rss_idle_sessions"] < 3 * bound
    assert results["enqueue_at_bound_us"] > 0
    assert "machine: " in done.stdout
