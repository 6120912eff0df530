"""Passwords never shown, names stay readable, and a reload that cannot log in is refused cleanly,
against a real PostgreSQL and Redis, with the bridge run as a user runs it (docs/architecture.md#bad-input)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from bridge.app import Bridge, Paths
from support.bridges import BridgeFactory
from support.mqtt import paho_connect_blocking
from support.process import BridgeProcess
from support.services import ROOT, start_postgres

PG_PORT = 5439  # shared with test_pgsql.py: scripts/postgres.sh reuses a running server
WRONG = "Wr0ng-pa55word-4-test"
REDIS_RULE = 'backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n'


def pg_pool(name: str, password: str) -> str:
    return (
        f"backend.pgsql.{name}.server = 127.0.0.1:{PG_PORT}\nbackend.pgsql.{name}.username = hookbridge\n"
        f"backend.pgsql.{name}.password = {password}\nbackend.pgsql.{name}.database = mqtt\n"
    )


@pytest.fixture(scope="module")
def postgres() -> int:
    start_postgres(PG_PORT)
    return PG_PORT


@pytest.fixture
def process(tmp_path: Path) -> Iterator[list[BridgeProcess]]:
    started: list[BridgeProcess] = []
    yield started
    for bridge in started:
        bridge.stop()


def test_check_and_run_refuse_a_password_in_a_server_url(tmp_path: Path, redis_port: int) -> None:
    """A regression: refused with its position, the password never echoed (docs/configuration.md says why)."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.conf").write_text(REDIS_RULE)
    (tmp_path / "bridge.conf").write_text(
        "metrics.listener = off\n"
        f"backend.redis.pool1.server = redis://app:Pw-in-URL-9@127.0.0.1:{redis_port}\n"
        "backend.pgsql.pool1.server = app:Pw-in-URL-9@127.0.0.1:5432\n"
    )
    for command in ("check", "run"):
        done = subprocess.run(
            [sys.executable, "-m", "bridge", command, "-c", "bridge.conf", "-r", "rules"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == 2, done.stderr
        refused = "expected host:port, not a URL or user@host (a password goes in its own secret setting)"
        assert f"bridge.conf:2:30: backend.redis.pool1.server: {refused}" in done.stderr
        assert f"bridge.conf:3:30: backend.pgsql.pool1.server: {refused}" in done.stderr
        assert "Pw-in-URL-9" not in done.stderr + done.stdout


def test_pgsql_password_equal_to_the_user_name_leaves_names_readable(
    tmp_path: Path, postgres: int, process: list[BridgeProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A regression: PGPASSWORD=hookbridge (scripts/postgres.sh) no longer turns the log into `*** ***@127.0.0.1`."""
    monkeypatch.setenv("PGPASSWORD", "hookbridge")
    rule = 'backend.pgsql.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n'
    bridge = BridgeProcess(tmp_path, pg_pool("pool1", "${PGPASSWORD:-}"), rule)
    conf = tmp_path / "bridge.conf"
    conf.write_text(conf.read_text().replace("node.name = test@127.0.0.1", "node.name = hookbridge@127.0.0.1"))
    process.append(bridge.start())
    bridge.wait_for(lambda: "running" in bridge.log.read_text(), "the bridge to run")
    assert bridge.terminate() == 0
    log = bridge.log.read_text()
    assert "bridge.app: hookbridge hookbridge@127.0.0.1 running: 1 rules, pools pgsql.pool1, broker embedded" in log
    assert "***" not in log


def test_a_reload_whose_new_pool_cannot_log_in_is_refused_in_one_line(
    tmp_path: Path, postgres: int, redis_db: redis_sync.Redis, redis_port: int, process: list[BridgeProcess]
) -> None:
    """A reload that cannot log in (and a running bridge's bad value): one clear line, no traceback, no password in the
    log or /healthz; the old rules keep running; a corrected reload then adds the pool."""
    pools = f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\n"
    bridge = BridgeProcess(tmp_path, pools, REDIS_RULE)
    process.append(bridge.start())
    conf = tmp_path / "bridge.conf"
    conf.write_text(conf.read_text() + pg_pool("pool2", WRONG))
    pg_rule = (
        'backend.pgsql.hook.client.connected.1 = {"action": {"function": "on_client_connected"}, "pool": "pool2"}\n'
    )
    (tmp_path / "rules" / "test.conf").write_text(REDIS_RULE + pg_rule)
    assert bridge.process is not None
    bridge.process.send_signal(signal.SIGHUP)
    bridge.wait_for(lambda: "keeping the 1 rules loaded before" in bridge.log.read_text(), "the reload to be refused")

    log = bridge.log.read_text()
    assert (
        'ERROR bridge.app: reload refused: pool pgsql.pool2 cannot connect: password authentication failed for user "hookbridge"'
        in log
    )
    assert "Traceback" not in log
    assert "never retrieved" not in log
    answer = bridge.get("/healthz")
    assert answer is not None
    health = json.loads(answer[1])
    assert answer[0] == 200, health
    assert list(health["pools"]) == ["redis.pool1"]
    assert WRONG not in log + answer[1] + (bridge.get("/metrics") or (0, ""))[1]
    # the old rule still runs
    paho_connect_blocking(bridge.mqtt_port, "after-refused-reload")
    bridge.wait_for(lambda: redis_db.hget("mqtt:client:after-refused-reload", "state") == b"1", "the old rule")

    conf.write_text(conf.read_text().replace(WRONG, "hookbridge"))
    bridge.process.send_signal(signal.SIGHUP)
    bridge.wait_for(lambda: "rules reloaded: 2 rules" in bridge.log.read_text(), "the corrected reload")
    answer = bridge.get("/healthz")
    assert answer is not None
    assert sorted(json.loads(answer[1])["pools"]) == ["pgsql.pool2", "redis.pool1"]
    assert bridge.terminate() == 0


async def test_a_pool_added_by_reload_trims_when_the_new_rules_say_so(
    make_bridge: BridgeFactory, postgres: int
) -> None:
    """A regression: `trim_enabled` of a pool added by reload comes from the rules being loaded."""
    bridge: Bridge = await make_bridge(REDIS_RULE)
    paths: Paths = bridge.paths
    paths.config.write_text(paths.config.read_text() + pg_pool("pool1", "hookbridge"))
    (paths.rules / "test.conf").write_text(
        REDIS_RULE
        + 'backend.pgsql.hook.message.publish.1 = {"topic": "t/#", "action": {"function": "on_message_publish"}, "expired_time": 3600}\n'
    )
    assert await bridge.reload()
    assert bridge.runners["pgsql.pool1"].backend.trim_enabled
    assert not bridge.runners["redis.pool1"].backend.trim_enabled
