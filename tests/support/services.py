"""Servers the tests use, started through the project's own scripts (idempotent)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start_redis(port: int, *options: str) -> None:
    subprocess.run(["bash", str(ROOT / "scripts" / "redis.sh"), str(port), *options], check=True)


def stop_redis(port: int) -> None:
    subprocess.run(["redis-cli", "-p", str(port), "shutdown"], check=False, capture_output=True)
