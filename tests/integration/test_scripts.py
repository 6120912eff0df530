"""The service scripts as the docs show them: `scripts/<service>.sh [PORT] [start|stop]`, run directly.

Each test takes a port nobody uses, so the servers other tests share are never touched; what a
test starts it stops. The apt test runs the real apt-get against a private apt state directory
(APT_CONFIG), never the machine's.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from support.services import ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def _script(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `scripts/<name> args...` from the checkout, as a user types it (so it must be executable)."""
    return subprocess.run(
        [str(ROOT / "scripts" / name), *args], cwd=ROOT, capture_output=True, text=True, env=env, check=False
    )


@pytest.fixture
def port() -> Iterator[int]:
    port = _free_port()
    yield port
    for name in ("redis", "mosquitto"):  # whatever a failed test left running, and its folder
        _script(f"{name}.sh", str(port), "stop")
        shutil.rmtree(ROOT / ".run" / f"{name}-{port}", ignore_errors=True)


def test_redis_starts_and_stops_on_a_port(port: int) -> None:
    assert _script("redis.sh", str(port)).returncode == 0
    assert redis_sync.Redis(port=port).ping()
    stopped = _script("redis.sh", str(port), "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not _answers(port)
    assert _script("redis.sh", str(port), "stop").returncode == 0  # stopping twice is fine
    assert not _answers(port)


def test_redis_options_still_reach_redis_server(port: int) -> None:
    for args in ([str(port), "--appendonly", "yes"], [str(port), "start", "--appendonly", "yes"]):
        assert _script("redis.sh", *args).returncode == 0
        client = redis_sync.Redis(port=port, decode_responses=True)
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        client.close()
        assert _script("redis.sh", str(port), "stop").returncode == 0
        assert not _answers(port)
    assert _script("redis.sh", "start", str(port), "stray").returncode == 2  # not a port, action or option


def test_redis_stop_leaves_a_server_it_did_not_start_alone(port: int, tmp_path: Path) -> None:
    options = f"--port {port} --bind 127.0.0.1 --daemonize yes --dir {tmp_path} --pidfile {tmp_path}/redis.pid"
    subprocess.run(["redis-server", *options.split()], check=True)
    client = redis_sync.Redis(port=port)
    try:
        for _ in range(100):  # --daemonize returns before the child listens
            if _answers(port):
                break
            time.sleep(0.05)
        assert _script("redis.sh", str(port), "stop").returncode == 0
        assert client.ping()
    finally:
        client.shutdown(nosave=True)


def test_mosquitto_starts_and_stops_on_a_port(port: int) -> None:
    started = _script("mosquitto.sh", str(port))
    assert started.returncode == 0, started.stderr
    assert _answers(port)
    assert _script("mosquitto.sh", str(port), "stop").returncode == 0
    assert not _answers(port)


def test_a_script_notes_what_it_started_and_not_what_it_reused(port: int, tmp_path: Path) -> None:
    """scripts/test.sh stops, at the end, exactly the servers these notes name."""
    notes = tmp_path / "started"
    env = {**os.environ, "HOOKBRIDGE_SERVICES_STARTED": str(notes)}
    assert _script("redis.sh", str(port), env=env).returncode == 0
    assert _script("redis.sh", str(port), env=env).returncode == 0  # reused: no second note
    assert notes.read_text() == f"redis.sh {port}\n"


# -- apt: wait for another apt-get instead of failing at once (scripts/lib.sh) ----------------------


@pytest.fixture
def apt_sandbox(tmp_path: Path) -> dict[str, str]:
    """An environment in which apt-get uses a private, empty state: its locks are ours to take."""
    if os.geteuid() != 0:
        pytest.skip("apt-get needs root here (sudo would drop APT_CONFIG and use the machine's state)")
    for folder in ("state/lists/partial", "dpkg/updates", "parts", "cache/archives/partial", "log"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "dpkg" / "status").touch()
    settings = {
        "Dir::State": "state",
        "Dir::State::status": "dpkg/status",
        "Dir::Etc::SourceList": "parts/none.list",
        "Dir::Etc::SourceParts": "parts",
        "Dir::Cache": "cache",
        "Dir::Log": "log",
    }
    conf = tmp_path / "apt.conf"
    conf.write_text("".join(f'{key} "{tmp_path / value}";\n' for key, value in settings.items()))
    return {**os.environ, "APT_CONFIG": str(conf)}


@pytest.mark.parametrize(
    ("lock", "call", "waiting"),
    [
        ("dpkg/lock-frontend", "apt_get install -y", "Waiting for cache lock"),
        ("state/lists/lock", "apt_update", "waiting for another apt-get"),
    ],
)
def test_apt_waits_while_another_apt_holds_its_lock(
    apt_sandbox: dict[str, str], tmp_path: Path, lock: str, call: str, waiting: str
) -> None:
    with open(tmp_path / lock, "a") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running apt-get holds (fcntl, not flock)
        apt = subprocess.Popen(
            ["bash", "-c", f". scripts/lib.sh; {call}"],
            cwd=ROOT,
            env=apt_sandbox,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert apt.stdout is not None
        seen = []
        for line in apt.stdout:  # until it says it waits (or ends: it gave up at once)
            seen.append(line)
            if waiting in line:
                break
        assert any(waiting in line for line in seen), "".join(seen)
        fcntl.lockf(held, fcntl.LOCK_UN)
    rest = apt.communicate(timeout=120)[0]
    assert apt.returncode == 0, "".join(seen) + rest
