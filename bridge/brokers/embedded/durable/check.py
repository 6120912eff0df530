"""`hookbridge check --durable`: the full integrity check of the durable store, on demand.

The bridge runs SQLite's quick check at every open (store.DurableStore); this one also compares
every index with its table and parses every session's rows, so it reads the whole file: run it
when the quick check or a refused session (`durable_unreadable` at /metrics) points at damage,
or before a backup. It opens the store read-only, so it can run beside a running bridge.
"""

from __future__ import annotations

from pathlib import Path

from bridge.brokers.embedded.durable.store import FILENAME, RECOVERY, full_check


def check_durable(directory: str | Path) -> tuple[bool, list[str]]:
    """(sound, what to print) for the store in `directory` (broker.durable_dir)."""
    path = Path(directory) / FILENAME
    if not path.is_file():
        return True, [f"ok: no durable store at {path} yet (it is made at the first start)"]
    problems = full_check(path)
    if not problems:
        return True, [f"ok: durable store {path}: integrity check passed"]
    lines = [f"{path}: damaged: {problem}" for problem in problems[:20]]
    if len(problems) > 20:
        lines.append(f"{path}: {len(problems) - 20} more problems")
    lines.append(f"{path}: to recover: {RECOVERY}")
    return False, lines
