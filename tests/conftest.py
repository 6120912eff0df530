"""Shared fixtures: a real Redis started by scripts/redis.sh, and bridges built from config + rules text.

hypothesis is imported up front: its pytest plugin imports it lazily at the end of the session,
and on CPython 3.11.7 an `ast.parse` that late can fail with "AST constructor recursion depth
mismatch" once any code in the process has hit a RecursionError (CPython gh-106905).
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import hypothesis  # noqa: F401
import pytest
import redis as redis_sync

from bridge.app import Bridge, Paths
from support.bridges import BridgeFactory
from support.conf import config_text
from support.services import ROOT, start_redis

REDIS_TEST_PORT = 6391


@pytest.fixture(scope="session")
def redis_port() -> int:
    start_redis(REDIS_TEST_PORT)
    return REDIS_TEST_PORT


@pytest.fixture
def redis_db(redis_port: int) -> Iterator[redis_sync.Redis]:
    """A synchronous client on an emptied test Redis (bytes in, bytes out)."""
    client = redis_sync.Redis(port=redis_port, protocol=2)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
async def make_bridge(tmp_path: Path, redis_port: int) -> AsyncIterator[BridgeFactory]:
    """Start bridges from config/rules text (shipped rules by default); all stopped at the end."""
    started: list[Bridge] = []
    counter = iter(range(1000))

    async def factory(
        rules: str | None = None,
        extra_config: str = "",
        port: int | None = None,
        templates: dict[str, str] | None = None,
        pools: str | None = None,
        spool: Path | None = None,
        http: bool = False,
    ) -> Bridge:
        home = tmp_path / f"bridge{next(counter)}"
        (home / "rules").mkdir(parents=True)
        shutil.copytree(ROOT / "templates", home / "templates")
        for name, text in (templates or {}).items():
            (home / "templates" / name).parent.mkdir(parents=True, exist_ok=True)
            (home / "templates" / name).write_text(text)
        if rules is None:
            shutil.copy(ROOT / "rules" / "redis.conf", home / "rules" / "redis.conf")
        else:
            (home / "rules" / "test.conf").write_text(rules)
        # Each bridge its own spool, unless a test restarts one on the same spool.
        spool_line = f"spool.dir = {spool or home / 'spool'}\ndeadletter.dir = {home / 'deadletter'}\n"
        text = config_text(port or redis_port, spool_line + extra_config, pools)
        if http:  # /metrics, /healthz and the API on a free port (bridge.status.port)
            text = text.replace("metrics.listener = off\n", "metrics.listener = 127.0.0.1:0\n")
        (home / "bridge.conf").write_text(text)
        bridge = Bridge.load(Paths(home / "bridge.conf", home / "rules"))
        await bridge.start()
        started.append(bridge)
        return bridge

    yield factory
    for bridge in reversed(started):
        await bridge.stop(drain_timeout=5)
