"""The idle connection memory bench (bench/idle_memory.py) runs whole at a tiny size: the broker
under tracemalloc answers both snapshot signals, the breakdown names what a connection holds
(and marks what idle connections share), and the RSS figures of both brokers (the embedded one on
both transports) come out. No
figure is judged: what memory a run measures depends on the machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_run_breaks_an_idle_connection_down(tmp_path: Path) -> None:
    out = tmp_path / "rss.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.idle_memory", "--clients", "50", "--top", "5", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rss = json.loads(out.read_text())
    # Mosquitto, the embedded broker on its own transport and on the event loop's
    assert len(rss) == 3 and any(name.startswith("Mosquitto") for name in rss)
    assert any(name.endswith("the loop's transport") for name in rss)
    for section in ("SessionState", "transport (tcp.py's", "Python heap per idle connection"):
        assert section in done.stdout
    # Idle sessions share their empty containers (tests/unit/test_idle_session_memory.py).
    assert "subscriptions" in done.stdout and "(shared: 0 each)" in done.stdout
    assert "machine: " in done.stdout
