"""A Mosquitto of a test's own: Debian's Mosquitto 2.0 (installed by scripts/mosquitto.sh if
missing) on a free loopback port, with a config written here rather than the mqtt-mode one
scripts/mosquitto.sh writes: no persistence (no session or retained message survives into a later
run), anonymous clients on loopback, every log line in a file beside the config.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.process import free_port
from support.services import ROOT


@contextmanager
def own_mosquitto(folder: Path, settings: str = "") -> Iterator[int]:
    """Run Mosquitto with `settings` (mosquitto.conf lines) added to the base config; yields its port."""
    if shutil.which("mosquitto") is None:
        # The project's script installs the Debian package (and starts its mqtt-mode broker).
        subprocess.run(["bash", str(ROOT / "scripts" / "mosquitto.sh"), "1885"], check=True)
    port = free_port()
    conf = folder / "mosquitto.conf"
    log = folder / "mosquitto.log"
    lines = f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n{settings}"
    lines += f"log_dest file {log}\nlog_type all\n"
    if os.geteuid() == 0:
        lines += "user root\n"  # as root it would switch to `mosquitto`, who cannot write the log here
    conf.write_text(lines)
    process = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, process, log)
        yield port
    finally:
        process.terminate()
        process.wait(10)


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mosquitto exited with {process.returncode}: {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"mosquitto did not listen on {port}: {log.read_text()}")
