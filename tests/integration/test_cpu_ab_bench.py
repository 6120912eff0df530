"""bench/cpu_ab.py (this checkout's broker CPU per message against another revision's) runs whole
at a small size: both sides' bridges carry every message (publish_through fails otherwise), each
run gives a CPU figure, and the revision's worktree is gone afterwards. No figure is judged:
timing never decides a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_small_run_measures_both_sides_and_leaves_no_worktree(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    command = ["-m", "bench.cpu_ab", "--against", "HEAD", "--rounds", "2", "--runs", "1", "--messages", "2000"]
    done = subprocess.run(
        [sys.executable, *command, "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [len(results["cpu_us"][side]) for side in ("before", "after")] == [2, 2]
    assert all(value > 0 for side in ("before", "after") for value in results["cpu_us"][side])
    assert "before: " in done.stdout and "after: this checkout" in done.stdout
    trees = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "cpu-ab-" not in trees
