"""A bridge in its own process (`python -m bridge run`), for tests that kill, stop or limit it."""

from __future__ import annotations

import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from support.services import ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class BridgeProcess:
    """A bridge home (config, rules, spool) and the process running it; restartable on the same home."""

    def __init__(self, home: Path, pools: str, rules: str, extra: str = "") -> None:
        self.home = home
        self.mqtt_port, self.metrics_port = free_port(), free_port()
        (home / "rules").mkdir(parents=True, exist_ok=True)
        (home / "templates").mkdir(exist_ok=True)
        (home / "rules" / "test.conf").write_text(rules)
        (home / "bridge.conf").write_text(
            f"node.name = test@127.0.0.1\nbroker.listener.tcp = 127.0.0.1:{self.mqtt_port}\n"
            f"metrics.listener = 127.0.0.1:{self.metrics_port}\nspool.dir = {home / 'spool'}\n" + pools + extra
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.log = home / "bridge.log"

    def start(self, file_size_limit: int | None = None, workers: int = 1) -> BridgeProcess:
        def limits() -> None:
            if file_size_limit is not None:  # a full disk, as far as the spool can tell
                resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bridge", "run", "-c", "bridge.conf", "-r", "rules", "--workers", str(workers)],
                cwd=self.home,
                stdout=log,
                stderr=log,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                preexec_fn=limits,
            )
        self.wait_for(lambda: self.get("/healthz") is not None, "the bridge to serve /healthz")
        return self

    def get(self, path: str) -> tuple[int, str] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=2) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return None

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples whose labels include `labels`."""
        answer = self.get("/metrics")
        assert answer is not None, "no /metrics"
        total = 0.0
        for line in answer[1].splitlines():
            match = re.match(rf"^{name}(\{{.*\}})? (\S+)$", line)
            if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
                total += float(match.group(2))
        return total

    def ready(self) -> bool:
        answer = self.get("/healthz")
        return answer is not None and answer[0] == 200

    def rss_bytes(self) -> int:
        assert self.process is not None
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def wait_for(self, check: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"the bridge exited ({self.process.returncode}):\n{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
