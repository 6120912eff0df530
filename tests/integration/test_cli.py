"""The `hookbridge` command as a user runs it: check, run (exit 2 on errors, SIGHUP, SIGTERM), schema,
/metrics and /healthz."""

from __future__ import annotations

import json
import os
import queue
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
import redis as redis_sync

from support.mqtt import paho_connect_blocking
from support.services import ROOT

BAD_RULES = (
    'backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_conect"}}\n'
    'backend.redis.hook.message.publish.1 = {"topic": "a/#/b", "action": {"function": "on_message_publish"}}\n'
)
GOOD_RULES = 'backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hookbridge(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.fixture
def home(tmp_path: Path, redis_port: int) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "templates").mkdir()
    (tmp_path / "config").mkdir()
    mqtt, metrics = free_port(), free_port()
    (tmp_path / "config" / "bridge.conf").write_text(
        f"broker.listener.tcp = 127.0.0.1:{mqtt}\nmetrics.listener = 127.0.0.1:{metrics}\n"
        f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\n"
    )
    (tmp_path / "ports").write_text(f"{mqtt} {metrics}")
    return tmp_path


def ports(home: Path) -> tuple[int, int]:
    mqtt, metrics = (home / "ports").read_text().split()
    return int(mqtt), int(metrics)


def test_check_lists_every_error_and_exits_2(home: Path) -> None:
    (home / "rules" / "r.conf").write_text(BAD_RULES)
    result = hookbridge("check", cwd=home)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "rules/r.conf:1:65: unknown function 'on_client_conect' for client.connected "
        "(did you mean on_client_connected?)",
        "rules/r.conf:2:50: bad topic filter 'a/#/b': '#' must be a whole level and the last one",
        "2 problems found",
    ]
    (home / "rules" / "r.conf").write_text(GOOD_RULES)
    result = hookbridge("check", cwd=home)
    assert result.returncode == 0, result.stderr
    assert "1 rules, pools redis.pool1" in result.stdout


def test_run_refuses_to_start_on_errors(home: Path) -> None:
    (home / "rules" / "r.conf").write_text(BAD_RULES)
    (home / "config" / "bridge.conf").write_text(
        (home / "config" / "bridge.conf").read_text() + "broker.mood = embedded\n"
    )
    result = hookbridge("run", cwd=home)
    assert result.returncode == 2
    assert "config/bridge.conf:4:1: unknown key broker.mood (did you mean broker.mode?)" in result.stderr
    mqtt, _ = ports(home)
    with socket.socket() as sock:  # nothing was started
        assert sock.connect_ex(("127.0.0.1", mqtt)) != 0


def test_schema_prints_the_redis_layout(home: Path) -> None:
    result = hookbridge("schema", "--pool", "redis.pool1", cwd=home)
    assert result.returncode == 0
    assert "mqtt:msg:<msgid>" in result.stdout and "mqtt:acked:<clientid>:<topic>" in result.stdout
    result = hookbridge("schema", "--pool", "redis.nope", cwd=home)
    assert result.returncode == 2
    assert "no pool 'redis.nope' (configured: redis.pool1)" in result.stderr
    config = home / "config" / "bridge.conf"
    config.write_text(config.read_text() + "backend.pgsql.pool1.server = 127.0.0.1:1\n")
    result = hookbridge("schema", "--pool", "pgsql.pool1", "--apply", cwd=home)
    assert result.returncode == 1
    assert result.stderr.startswith("schema for pgsql.pool1: ")
    assert "Traceback" not in result.stderr


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for_port(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def test_run_serves_metrics_health_reloads_and_stops(home: Path, redis_db: redis_sync.Redis) -> None:
    (home / "rules" / "r.conf").write_text(GOOD_RULES)
    mqtt, metrics = ports(home)
    process = subprocess.Popen(
        [sys.executable, "-m", "bridge", "run"],
        cwd=home,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        wait_for_port(mqtt)
        wait_for_port(metrics)
        status, body = http_get(metrics, "/healthz")
        assert status == 200
        assert json.loads(body)["pools"]["redis.pool1"]["up"] is True

        paho_connect_blocking(mqtt, "cli-client")
        deadline = time.monotonic() + 10
        while redis_db.hget("mqtt:client:cli-client", "state") != b"1":
            assert time.monotonic() < deadline, "connected event not stored"
            time.sleep(0.05)
        # the write is visible in Redis a moment before the runner counts it: wait for the count
        succeeded = 'hookbridge_rule_succeeded_total{pool="redis.pool1",rule="redis.client.connected.1"} 1.0'
        while succeeded not in (text := http_get(metrics, "/metrics")[1]):
            assert time.monotonic() < deadline, f"{succeeded} not in /metrics"
            time.sleep(0.05)
        assert 'hookbridge_events_total{hookpoint="client.connected"} 1.0' in text
        assert 'hookbridge_broker_dropped_messages{pool="embedded"} 0.0' in text
        assert 'hookbridge_broker_refused_total{reason="max_connections"} 0.0' in text

        # a broken reload keeps the old rules; a good one replaces them
        (home / "rules" / "r.conf").write_text(BAD_RULES)
        process.send_signal(signal.SIGHUP)
        time.sleep(1)
        _, text = http_get(metrics, "/metrics")
        assert 'rule="redis.client.connected.1"' in text
        (home / "rules" / "r.conf").write_text(
            GOOD_RULES
            + 'backend.redis.hook.client.disconnected.1 = {"action": {"function": "on_client_disconnected"}}\n'
        )
        process.send_signal(signal.SIGHUP)
        time.sleep(1)
        paho_connect_blocking(mqtt, "cli-client-2")
        deadline = time.monotonic() + 10
        while redis_db.hget("mqtt:client:cli-client-2", "state") != b"0":
            assert time.monotonic() < deadline, "reloaded disconnected rule did not run"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0
    assert "reload refused: rules/r.conf:1:65: unknown function 'on_client_conect'" in stderr
    assert "rules reloaded: 2 rules" in stderr
    assert "hookbridge stopped" in stderr


# docs/architecture.md#bad-input: what `run` would refuse, `check` refuses first, with the same lines from both.
ITEM4_CONFIG = (
    "broker.listener.tcp = [::1\n"
    "broker.max_offline_messages = 0\n"
    "backend.redis.pool1.server = 127.0.0.1:{redis_port}\n"
    "backend.redis.pool1.database = -1\n"
    "spool.dir = /etc/passwd\n"
    "backend.redis.pool1.queue_size = -5\n"
    "backend.redis.pool1.batch_size = 0\n"
    "backend.redis.pool1.pool_size = 1e29\n"
    'node.name = "a\\u0000b"\n'
)
ITEM4_RULES = (
    'backend.redis.hook.message.publish.1 = {"action": {"commands": ["FOOBAR k:${clientid} ${payload}"]}}\n'
    "backend.redis.hook.message.publish.2 = " + "[" * 5000 + "]" * 5000 + "\n"
)


def test_check_and_run_refuse_item_4_values_with_the_same_lines(home: Path, redis_port: int) -> None:
    (home / "config" / "bridge.conf").write_text(ITEM4_CONFIG.format(redis_port=redis_port))
    (home / "rules" / "r.conf").write_text(ITEM4_RULES)
    config_lines = [
        "config/bridge.conf:1:23: broker.listener.tcp: expected [IPv6 address]:port, got '[::1'",
        "config/bridge.conf:4:32: backend.redis.pool1.database: expected an integer from 0 to 2147483647, got '-1'",
        "config/bridge.conf:5:13: spool.dir: /etc/passwd exists and is not a directory",
        "config/bridge.conf:6:34: backend.redis.pool1.queue_size: expected an integer from 1 to 100000000, got '-5'",
        "config/bridge.conf:7:34: backend.redis.pool1.batch_size: expected an integer from 1 to 100000, got '0'",
        "config/bridge.conf:8:33: backend.redis.pool1.pool_size: expected an integer from 1 to 1024, got '1e29'",
        "config/bridge.conf:9:13: node.name: contains the control character U+0000",
    ]
    rule_lines = [
        "rules/r.conf:1:66: unknown Redis command 'FOOBAR'",
        "rules/r.conf:2:72: bad JSON: nested deeper than 32 levels",
        "2 problems found",
    ]
    # docs/architecture.md#bad-input: the rules are checked too when the config has errors, all reported in one run.
    both = [*config_lines, *rule_lines[:-1], "9 problems found"]
    for command in ("check", "run"):
        result = hookbridge(command, cwd=home)
        assert (result.returncode, result.stderr.splitlines()) == (2, both), command
    (home / "config" / "bridge.conf").write_text(f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\n")
    for command in ("check", "run"):
        result = hookbridge(command, cwd=home)
        assert (result.returncode, result.stderr.splitlines()) == (2, rule_lines), command


def read_lines(stream: IO[str]) -> tuple[queue.Queue[str], threading.Thread]:
    """The lines of a child's stderr as they come (a thread reads until the child closes it)."""
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True)
    reader.start()
    return lines, reader


def wait_for_line(lines: queue.Queue[str], text: str, seen: list[str]) -> None:
    deadline = time.monotonic() + 20
    while not any(text in line for line in seen):
        seen.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))


def test_run_on_ipv6_with_no_offline_limit_and_a_deeply_nested_reload(home: Path, redis_port: int) -> None:
    mqtt, _ = ports(home)
    (home / "config" / "bridge.conf").write_text(
        f"broker.listener.tcp = [::1]:{mqtt}\nbroker.max_offline_messages = 0\nmetrics.listener = off\n"
        f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\n"
    )
    (home / "rules" / "r.conf").write_text(GOOD_RULES)
    process = subprocess.Popen(
        [sys.executable, "-m", "bridge", "run"],
        cwd=home,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stderr is not None
    (lines, reader), seen = read_lines(process.stderr), []
    try:
        wait_for_line(lines, "running: 1 rules", seen)
        with socket.socket(socket.AF_INET6) as sock:  # the listener is on IPv6 loopback
            assert sock.connect_ex(("::1", mqtt)) == 0
        (home / "rules" / "r.conf").write_text(ITEM4_RULES)
        process.send_signal(signal.SIGHUP)
        wait_for_line(lines, "reload refused: keeping the 1 rules loaded before", seen)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    reader.join(timeout=10)
    log = "".join(seen) + "".join(lines.get() for _ in range(lines.qsize()))
    assert "reload refused: rules/r.conf:2:72: bad JSON: nested deeper than 32 levels" in log
    assert "reload refused: rules/r.conf:1:66: unknown Redis command 'FOOBAR'" in log
    assert "Traceback" not in log and "never retrieved" not in log
    assert process.returncode == 0


def test_check_and_run_refuse_colliding_listeners_and_unusable_directories(home: Path, redis_port: int) -> None:
    """A regression (docs/architecture.md#bad-input): `check` said ok where `run` then failed (exit 1): a second listener on the
    MQTT listener's address, and directories `run` cannot create (/proc as root passes os.access)."""
    mqtt = free_port()
    (home / "config" / "bridge.conf").write_text(
        f"broker.listener.tcp = 127.0.0.1:{mqtt}\n"
        f"metrics.listener = 127.0.0.1:{mqtt}\n"
        f"broker.listener.ws = 0.0.0.0:{mqtt}\n"
        f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\n"
        "spool.dir = /proc/x\n"
        "deadletter.dir = /proc/y/z\n"
        "broker.durable_dir = /proc/d\n"
    )
    lines = [
        f"config/bridge.conf:2:20: metrics.listener = 127.0.0.1:{mqtt} is the address of broker.listener.tcp",
        f"config/bridge.conf:3:22: broker.listener.ws = 0.0.0.0:{mqtt} is the address of broker.listener.tcp",
        "config/bridge.conf:5:13: spool.dir: cannot use /proc/x: No such file or directory",
        "config/bridge.conf:6:18: deadletter.dir: cannot use /proc/y/z: No such file or directory",
        "config/bridge.conf:7:22: broker.durable_dir: cannot use /proc/d: No such file or directory",
        "5 problems found",
    ]
    for command in ("check", "run"):
        result = hookbridge(command, cwd=home)
        assert (result.returncode, result.stderr.splitlines()) == (2, lines), command


def test_a_bad_config_and_bad_rules_are_reported_together(home: Path, redis_port: int) -> None:
    """docs/architecture.md#bad-input: every config error and every rule error in one run, the rules checked against
    what the config could be read into (its pool is known, its bad value has the default)."""
    (home / "config" / "bridge.conf").write_text(
        f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\nbackend.redis.pool1.batch_size = many\nnosuch.key = 1\n"
    )
    (home / "rules" / "r.conf").write_text(
        'backend.redis.hook.message.publish.1 = {"pool": "pool1", "action": {"function": "on_message_publish"}}\n'
        'backend.redis.hook.message.publish.2 = {"pool": "pool9", "action": {"function": "on_message_publish"}}\n'
        'backend.redis.hook.client.nosuch.1 = {"action": {"function": "on_client_connected"}}\n'
    )
    for command in ("check", "run"):
        result = hookbridge(command, cwd=home)
        lines = result.stderr.splitlines()
        assert result.returncode == 2, (command, lines)
        assert lines[0].startswith("config/bridge.conf:2:34: backend.redis.pool1.batch_size:"), lines
        assert lines[1].startswith("config/bridge.conf:3:1: unknown key nosuch.key"), lines
        assert lines[2].startswith("rules/r.conf:2:") and "pool9" in lines[2], lines
        assert lines[3].startswith("rules/r.conf:3:") and "client.nosuch" in lines[3], lines
        assert lines[4:] == ["4 problems found"], lines


def _nofile(soft: int, hard: int) -> Callable[[], None]:
    """A preexec_fn: the child starts with this open-file limit (as after `ulimit -n`)."""
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_open_file_limit_refused_by_check_and_run_raised_by_run(home: Path, redis_port: int) -> None:
    """A regression (docs/brokers.md#limits, `broker.max_connections`): with `ulimit -n 1024` the bridge started and failed at about 1,000 clients.
    A hard limit that cannot hold broker.max_connections (plus the reserve) is refused by both
    `check` and `run` at that setting; `run` raises the soft limit to the hard one."""
    mqtt, _ = ports(home)
    conf = home / "config" / "bridge.conf"
    base = conf.read_text()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    conf.write_text(base + "broker.max_connections = 1000000\n")
    for command in ("check", "run"):
        result = subprocess.run(
            [sys.executable, "-m", "bridge", command],
            cwd=home,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            preexec_fn=_nofile(1024, 20_000),
        )
        assert result.returncode == 2, (command, result.stderr)
        first, count = result.stderr.splitlines()
        assert first.startswith("config/bridge.conf:4:26: broker.max_connections = 1000000 needs 1000136 open files")
        assert "hard limit (ulimit -Hn) is 20000: set broker.max_connections to at most 19864" in first
        assert count == "1 problem found"
    # not set (0, the default): as many as the hard limit holds; only a limit that leaves no
    # room beside the reserve is refused, at the file's start
    conf.write_text(base)
    for hard, refused in ((4096, False), (100, True)):
        result = subprocess.run(
            [sys.executable, "-m", "bridge", "check"],
            cwd=home,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            preexec_fn=_nofile(min(hard, 1024), hard),
        )
        assert result.returncode == (2 if refused else 0), (hard, result.stderr)
        if refused:
            assert result.stderr.startswith("config/bridge.conf:1:1: the open-file hard limit (ulimit -Hn) is 100")
    # within the hard limit: run starts and raises its soft limit from 1024 to 4096
    conf.write_text(base + "broker.max_connections = 2000\n")
    (home / "rules" / "r.conf").write_text(GOOD_RULES)
    process = subprocess.Popen(
        [sys.executable, "-m", "bridge", "run"],
        cwd=home,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_nofile(1024, 4096),
    )
    assert process.stderr is not None
    (lines, reader), seen = read_lines(process.stderr), []
    try:
        wait_for_line(lines, "running: 1 rules", seen)
        wait_for_port(mqtt)
        limits = Path(f"/proc/{process.pid}/limits").read_text()
        row = next(line for line in limits.splitlines() if line.startswith("Max open files"))
        assert row.split()[3:5] == ["4096", "4096"], row
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    reader.join(timeout=10)
    log = "".join(seen) + "".join(lines.get() for _ in range(lines.qsize()))
    assert "open-file limit raised from 1024 to 4096 (the hard limit)" in log
    assert process.returncode == 0
