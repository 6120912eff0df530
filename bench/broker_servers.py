"""The brokers `bench.broker_bench` and `bench.durable_bench` measure, each a process of its own
on a free loopback port.

- Mosquitto 2.0 with a temporary config (anonymous clients, no connection limit; persistence
  off, as tests/broker_suite/conftest.py starts it, or on: `persistence true` in its workdir);
- hookbridge's embedded broker as a user runs it, `python -m bridge run`, from a temporary
  config and rules directory (no rules at all, or the shipped rules/redis.conf into a Redis;
  durable sessions off, or on with `broker.durable_dir` in its workdir).

A `Launch` is how to start one of them; running it again after a stop restarts the broker on
the same files and port, which is how the durable bench times a restart.

A broker is ready once it answers an MQTT CONNECT with a CONNACK (a listening socket is not
enough: the bridge listens before it is up). Memory is the resident set of the broker's whole
process tree, so a bridge that runs its database side in a second process is measured whole.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.services import ROOT
from bridge.brokers.embedded.codec import MQTT_3_1_1, Connect, encode

HOST = "127.0.0.1"
# CONNACK of MQTT 3.1.1: type 2, remaining length 2, no session present, return code 0 (accepted).
CONNACK_ACCEPTED = b"\x20\x02\x00\x00"
# A graceful stop may write a broker's whole state (Mosquitto's persistence file), so it gets time.
STOP_TIMEOUT = 120.0


def connect_packet(client_id: str) -> bytes:
    """A minimal MQTT 3.1.1 CONNECT: clean session, no keepalive (an idle client never pings)."""
    return encode(Connect(client_id=client_id, keepalive=0), MQTT_3_1_1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    started: float
    """time.perf_counter() just before the process was started."""

    def rss(self) -> int:
        """Resident bytes of the broker's process and all its descendants."""
        return tree_rss(self.process.pid)

    def stop(self, *, kill: bool = False) -> float:
        """SIGTERM (a graceful stop, which may write state to disk) or SIGKILL; the seconds until
        the process had exited."""
        started = time.perf_counter()
        self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"{self.name} did not stop in {STOP_TIMEOUT:.0f} s; see {self.log}") from None
        return time.perf_counter() - started


@dataclass(frozen=True)
class Launch:
    """How to start one broker process. `run()` again after its stop is a restart on the same
    config, files and port."""

    name: str
    command: list[str]
    workdir: Path
    port: int
    log_name: str
    metrics_port: int | None = None
    """hookbridge's /metrics listener, where it was asked for."""
    source: Path = ROOT
    """The directory the process runs in: for hookbridge, the checkout whose `bridge` it runs
    (`python -m bridge` finds it there first; bench.cpu_ab runs another revision's)."""

    def run(self, *, wait: bool = True) -> contextlib.AbstractContextManager[Server]:
        """The running broker; with `wait`, only once it answers a CONNECT (else right after
        the process started, for a caller that times its start itself)."""
        return _running(self, wait)


def tree_rss(root: int) -> int:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                # /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after ")"
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(child for child, parent in parents.items() if parent == pid)
    return sum(_rss(pid) for pid in tree)


def _rss(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0  # a process that exited while we looked


def mosquitto_version() -> str:
    done = subprocess.run(["mosquitto", "-h"], capture_output=True, text=True, check=False)
    words = done.stdout.split()
    return words[2] if len(words) > 2 and words[1] == "version" else "?"


def _wait_ready(server: Server, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.process.returncode}; see {server.log}")
        try:
            with socket.create_connection((HOST, server.port), timeout=2) as sock:
                sock.sendall(connect_packet("bench-ready"))
                if sock.recv(4) == CONNACK_ACCEPTED:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{server.name} did not accept an MQTT connection on {server.port} in {timeout:.0f} s")


@contextlib.contextmanager
def _running(launch: Launch, wait: bool) -> Iterator[Server]:
    log = launch.workdir / launch.log_name
    with log.open("ab") as sink:  # a restart's output goes after the previous run's
        started = time.perf_counter()
        process = subprocess.Popen(launch.command, stdout=sink, stderr=subprocess.STDOUT, cwd=launch.source)
    server = Server(launch.name, launch.port, process, log, started)
    try:
        if wait:
            _wait_ready(server)
        yield server
    finally:
        if process.poll() is None:  # not stopped by the caller already
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def mosquitto(workdir: Path) -> contextlib.AbstractContextManager[Server]:
    """Mosquitto on a free port, no persistence."""
    return mosquitto_launch(workdir).run()


def mosquitto_launch(workdir: Path, *, persistence: bool = False, password_file: Path | None = None) -> Launch:
    """Mosquitto on a free port; its connection limit off (it still needs the fds: see
    raise_fd_limit). With `persistence`, its file is `workdir/mosquitto.db`, written at its
    autosave (every 1,800 s by default, which no run here reaches) and when it stops. With
    `password_file`, its users are checked (anonymous clients are still let in)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    lines = [
        f"listener {port} {HOST}",
        "allow_anonymous true",
        f"persistence {'true' if persistence else 'false'}",
        f"persistence_location {workdir}/",
        "max_connections -1",
        # Its default, 1,000 messages queued per client, drops QoS 1 messages for a subscriber
        # that falls behind a publisher keeping 1,000 in flight (62 of 20,000 lost in a run here);
        # the embedded broker's bound is broker.max_offline_messages, 100,000.
        "max_queued_messages 100000",
        f"log_dest file {workdir / 'mosquitto.log'}",  # the default log types, as a user has them
    ]
    if password_file is not None:
        lines.append(f"password_file {password_file}")
    if os.geteuid() == 0:
        lines.append("user root")  # as root it would switch to `mosquitto`, who cannot write here
    conf = workdir / "mosquitto.conf"
    conf.write_text("\n".join(lines) + "\n")
    return Launch("mosquitto", ["mosquitto", "-c", str(conf)], workdir, port, "mosquitto.out")


# The interpreter that runs `-m bridge`: this one by default (the checkout's code, found from
# cwd=ROOT), or with `use_installed_bridge` another virtualenv's installed hookbridge, e.g. the
# compiled wheel (docs/development.md#the-compiled-build); -P keeps the checkout off its path.
BRIDGE_PYTHON = [sys.executable]


def use_installed_bridge(python: str) -> None:
    BRIDGE_PYTHON[:] = [python, "-P"]


def bridge_build() -> str:
    """Which build `-m bridge` runs: how many of its compiled modules are extensions."""
    done = subprocess.run([*BRIDGE_PYTHON, "-c", BUILD_REPORT], cwd=ROOT, capture_output=True, text=True, check=True)
    compiled, total = done.stdout.split()
    return f"compiled ({compiled} of {total} modules)" if int(compiled) else "pure Python"


BUILD_REPORT = (
    "import importlib; from bridge.extensions import COMPILED, is_compiled; "
    "print(sum(is_compiled(importlib.import_module(n)) for n in COMPILED), len(COMPILED))"
)


def hookbridge(
    workdir: Path, *, redis_port: int | None = None, max_connections: int | None = None
) -> contextlib.AbstractContextManager[Server]:
    """`python -m bridge run` on a free port: see hookbridge_launch."""
    return hookbridge_launch(workdir, redis_port=redis_port, max_connections=max_connections).run()


def hookbridge_launch(
    workdir: Path,
    *,
    redis_port: int | None = None,
    max_connections: int | None = None,
    durable: bool = False,
    metrics: bool = False,
    extra: tuple[str, ...] = (),
    source: Path = ROOT,
) -> Launch:
    """`python -m bridge run` on a free port from a fresh `workdir`: no rules, or (redis_port
    given) the shipped rules/redis.conf (of `source`, the checkout it runs) with its pool `pool1`
    pointed at that Redis; with
    `durable`, durable sessions on and their store in `workdir/durable`; with `metrics`, its
    /metrics on a free port too; `extra`: more config lines."""
    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "rules").mkdir(parents=True)
    port = free_port()
    metrics_port = free_port() if metrics else None
    config = [
        f"broker.listener.tcp = {HOST}:{port}",
        f"metrics.listener = {f'{HOST}:{metrics_port}' if metrics_port else 'off'}",
        f"spool.dir = {workdir / 'spool'}",
    ]
    if max_connections is not None:
        config.append(f"broker.max_connections = {max_connections}")
    if durable:
        config += ["broker.durable_sessions = on", f"broker.durable_dir = {workdir / 'durable'}"]
    if redis_port is not None:
        shutil.copy(source / "rules" / "redis.conf", workdir / "rules")
        config.append(f"backend.redis.pool1.server = {HOST}:{redis_port}")
    config += extra
    (workdir / "bridge.conf").write_text("\n".join(config) + "\n")
    command = [*BRIDGE_PYTHON, "-m", "bridge", "run", "-c", str(workdir / "bridge.conf"), "-r", str(workdir / "rules")]
    return Launch("hookbridge", command, workdir, port, "bridge.log", metrics_port, source)
