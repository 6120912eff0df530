"""The subscribers bench.mqtt_bench measures, each started as its own process the way a user
starts it, and the CPU time of a process tree read from /proc (a subscriber with workers is
several processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import pgsql_bench
from bench.services import ROOT

TICKS = os.sysconf("SC_CLK_TCK")
EXPIRED_TIME = 3600


@dataclass(frozen=True)
class Servers:
    mqtt_port: int
    redis_port: int
    pg_port: int


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` and every live descendant (0 for a process that is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total = (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
        children: list[int] = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as listed:
                children += [int(child) for child in listed.read().split()]
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return total + sum(cpu_seconds(child) for child in children)


def mosquitto_pid(port: int) -> int | None:
    """The broker scripts/mosquitto.sh started on `port` from this checkout (None: another one answers)."""
    try:
        pid = int((ROOT / ".run" / f"mosquitto-{port}" / "mosquitto.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def database_pid(db: str, port: int) -> int | None:
    """The server scripts/redis.sh or scripts/postgres.sh started on `port` from this checkout
    (PostgreSQL: its postmaster; cpu_seconds adds the backends)."""
    run = ROOT / ".run"
    pidfile = (
        run / f"redis-{port}" / "redis.pid" if db == "redis" else run / f"postgres-{port}" / "data" / "postmaster.pid"
    )
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    return pid


class Subscriber:
    """One subscriber process, its output in `<workdir>/<name>.log`."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        """SIGTERM (a clean stop), SIGKILL after 60 s; the exit code."""
        if self.running():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def bridge(
    db: str, servers: Servers, workdir: Path, prefix: str, workers: int | None, settings: Sequence[str] = ()
) -> list[str]:
    """`hookbridge run` in mqtt mode with one on_message_publish rule on `<prefix>/#`
    (`--workers N` on one shared subscription when `workers` is given); `settings` are the
    pool's `key=value` settings beyond the defaults."""
    (workdir / "rules").mkdir(parents=True, exist_ok=True)
    (workdir / "rules" / "bench.conf").write_text(
        f'backend.{db}.hook.message.publish.1 = {{"topic": "{prefix}/#", '
        f'"action": {{"function": "on_message_publish"}}, "expired_time": {EXPIRED_TIME}}}\n'
    )
    shared = f"broker.shared_group = {prefix}\n" if workers else ""
    if db == "redis":
        pool = f"backend.redis.pool1.server = 127.0.0.1:{servers.redis_port}\n"
    else:
        pool = pgsql_bench.bridge_config(servers.pg_port, {})
    for setting in settings:
        key, _, value = setting.partition("=")
        pool += f"backend.{db}.pool1.{key.strip()} = {value.strip()}\n"
    (workdir / "bridge.conf").write_text(
        "metrics.listener = off\nbroker.mode = mqtt\n"
        f"broker.server = 127.0.0.1:{servers.mqtt_port}\nbroker.clientid = hb-{prefix}\n"
        f"broker.session_expiry = 2m\n{shared}spool.dir = {workdir / 'spool'}\n{pool}"
    )
    command = [sys.executable, "-m", "bridge", "run", "-c", str(workdir / "bridge.conf"), "-r", str(workdir / "rules")]
    return command + (["--workers", str(workers)] if workers else [])


def workers_supported() -> bool:
    """Whether this checkout's `hookbridge run` takes `--workers`."""
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "run", "--help"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    return "--workers" in done.stdout


def _client(module: str, db: str, servers: Servers, prefix: str) -> list[str]:
    target = f"127.0.0.1:{servers.redis_port}" if db == "redis" else pgsql_bench.dsn(servers.pg_port)
    return [
        sys.executable,
        "-m",
        module,
        "--db",
        db,
        "--target",
        target,
        "--broker",
        f"127.0.0.1:{servers.mqtt_port}",
        "--filter",
        f"{prefix}/#",
        "--client-id",
        f"{module.rsplit('_', 1)[1]}-{prefix}",
        "--expired-time",
        str(EXPIRED_TIME),
    ]


def sketch(db: str, servers: Servers, prefix: str) -> list[str]:
    """bench/mqtt_sketch.py: gmqtt, PUBACK on receipt, pipelined writes."""
    return _client("bench.mqtt_sketch", db, servers, prefix)


def naive(db: str, servers: Servers, prefix: str) -> list[str]:
    """bench/mqtt_naive.py: paho, one write per message."""
    return _client("bench.mqtt_naive", db, servers, prefix)
