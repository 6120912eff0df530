"""bench/census_walk.py runs, at a tiny size, and reports what it walked (figures are never asserted)."""

from __future__ import annotations

import subprocess
import sys

from support.services import ROOT


def test_a_tiny_census_walk_reports_its_sizes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.census_walk", "--sessions", "50", "--filters", "3", "--queued", "1000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "50 sessions, 150 subscriptions, 1,000 queued messages" in done.stdout
    assert "longest hold-up of the loop during it" in done.stdout
