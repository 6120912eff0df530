"""Where the benchmarks find the project, and how they start the servers they need: through the
same scripts/ the tests use, each on its own port (a script leaves a running server as it is)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start_server(script: str, port: int, quiet: bool = True) -> None:
    """Run `scripts/<script> <port>`: the server is up when it returns."""
    subprocess.run(["bash", str(ROOT / "scripts" / script), str(port)], check=True, capture_output=quiet, cwd=ROOT)
