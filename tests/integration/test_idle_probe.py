"""A stalled database with no traffic is seen (docs/operations.md#health-get-healthz): each pool is probed while idle (Redis
PING, PostgreSQL `SELECT 1`), so /healthz turns 503 with the pool down within `request_timeout`
of a stall, and 200 once it answers again. The stall is a SIGSTOP of this module's own servers
(never the shared ones on the standard ports); the bridge is a real process serving /healthz."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
import redis as redis_sync

from support.process import BridgeProcess
from support.services import postgres_dsn, start_postgres, start_redis, stop_redis

REDIS_PORT = 6427  # this module's own servers: stopped with SIGSTOP by its tests
PG_PORT = 5451
RULE = 'backend.{db}.hook.message.publish.1 = {{"topic": "t/#", "action": {{"function": "on_message_publish"}}}}\n'
WAIT = 60  # generous: the probe sees a stall within request_timeout (1 s here)


def pool_state(bridge: BridgeProcess, pool: str) -> tuple[int, bool] | None:
    """(/healthz status, the pool's "up"), or None while the bridge does not answer."""
    answer = bridge.get("/healthz")
    if answer is None:
        return None
    status, body = answer
    return status, json.loads(body)["pools"][pool]["up"]


def _signal(pid: int, signum: int) -> None:
    """A server's process listed a moment ago may have ended since (a PostgreSQL backend whose
    connection closed): it needs no stopping."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def stall_and_resume(bridge: BridgeProcess, pool: str, pids: list[int]) -> None:
    bridge.wait_for(lambda: pool_state(bridge, pool) == (200, True), "the pool up while idle")
    for pid in pids:
        _signal(pid, signal.SIGSTOP)
    try:
        bridge.wait_for(lambda: pool_state(bridge, pool) == (503, False), "/healthz 503: pool down", WAIT)
    finally:
        for pid in pids:
            _signal(pid, signal.SIGCONT)
    bridge.wait_for(lambda: pool_state(bridge, pool) == (200, True), "/healthz 200: pool back", WAIT)


@pytest.fixture
def own_redis() -> Iterator[int]:
    start_redis(REDIS_PORT)
    client = redis_sync.Redis(port=REDIS_PORT)
    pid = int(client.info("server")["process_id"])
    client.close()
    yield pid
    os.kill(pid, signal.SIGCONT)  # whatever happened in the test
    stop_redis(REDIS_PORT)


def test_an_idle_redis_that_stalls_turns_healthz_503_and_back(tmp_path: Path, own_redis: int) -> None:
    pools = f"backend.redis.pool1.server = 127.0.0.1:{REDIS_PORT}\nbackend.redis.pool1.request_timeout = 1s\n"
    bridge = BridgeProcess(tmp_path, pools, RULE.format(db="redis")).start()
    try:
        stall_and_resume(bridge, "redis.pool1", [own_redis])
    finally:
        bridge.stop()


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def postgres_pids() -> list[int]:
    """The postmaster of this module's PostgreSQL and every process it started (the backends
    serving the bridge's connections are its children: stopping the postmaster alone stalls
    nothing already connected)."""

    async def postmaster_pid() -> int:
        conn = await asyncpg.connect(postgres_dsn(PG_PORT))
        try:  # the parent of the backend serving this connection, read while it lives
            return parent_pid(int(conn.get_server_pid()))
        finally:
            await conn.close()

    postmaster = asyncio.run(postmaster_pid())
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:  # its parent
                children.append(int(entry.name))
    return [postmaster, *children]


def test_an_idle_postgresql_that_stalls_turns_healthz_503_and_back(tmp_path: Path) -> None:
    start_postgres(PG_PORT)
    pools = (
        f"backend.pgsql.pool1.server = 127.0.0.1:{PG_PORT}\nbackend.pgsql.pool1.username = hookbridge\n"
        "backend.pgsql.pool1.password = hookbridge\nbackend.pgsql.pool1.database = mqtt\n"
        "backend.pgsql.pool1.request_timeout = 1s\n"
    )
    bridge = BridgeProcess(tmp_path, pools, RULE.format(db="pgsql")).start()
    try:
        bridge.wait_for(lambda: pool_state(bridge, "pgsql.pool1") == (200, True), "the pool up")
        stall_and_resume(bridge, "pgsql.pool1", postgres_pids())
    finally:
        bridge.stop()
