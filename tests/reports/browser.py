"""Open a report page in headless Chromium (Debian `chromium`): its DOM after rendering, console messages."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium() -> str | None:
    return shutil.which("chromium")


def render(page: Path) -> tuple[str, list[str]]:
    """(DOM after scripts ran, console lines): `--dump-dom` with console logging on stderr."""
    binary = chromium()
    assert binary, "chromium is not installed (scripts/test.sh installs the Debian package)"
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        done = subprocess.run(
            [
                binary,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--virtual-time-budget=5000",
                "--enable-logging=stderr",
                "--v=0",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    return done.stdout, console


def screenshot(page: Path, target: Path, height: int = 2000) -> None:
    binary = chromium()
    assert binary
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        subprocess.run(
            [
                binary,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--screenshot={target}",
                f"--window-size=1280,{height}",
                "--hide-scrollbars",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )
