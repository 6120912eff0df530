"""End to end from EMQX 4.4 Enterprise's files: `import-emqx` the Redis and PostgreSQL backend files of
tests/fixtures/emqx44 (pointed at the test servers), run the embedded broker with what it wrote, and
read what a client's connect and publish stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
import redis as redis_sync

from bridge.app import Bridge, Paths
from bridge.cli import main
from support.bridges import mqtt_port
from support.mqtt import Client
from support.services import ROOT, postgres_dsn, start_postgres

FIXTURES = ROOT / "tests" / "fixtures" / "emqx44" / "etc" / "plugins"
PG_PORT = 5439
NODE = "hookbridge@127.0.0.1"  # the generated config's node.name


@pytest.fixture
async def imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[Bridge]]:
    """Bridges started from the import's output; the listeners and spool set through the
    environment variables the generated config reads."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOOKBRIDGE_MQTT_LISTEN", "127.0.0.1:0")
    monkeypatch.setenv("HOOKBRIDGE_METRICS_LISTEN", "off")
    monkeypatch.setenv("HOOKBRIDGE_SPOOL_DIR", str(tmp_path / "spool"))
    started: list[Bridge] = []
    yield started
    for bridge in started:
        await bridge.stop(drain_timeout=5)


async def _run_import(tmp_path: Path, name: str, replace: dict[str, str], started: list[Bridge]) -> Bridge:
    source = tmp_path / "emqx" / "etc" / "plugins"
    source.mkdir(parents=True)
    text = (FIXTURES / name).read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    (source / name).write_text(text)
    out = tmp_path / "hookbridge"
    assert main(["import-emqx", str(tmp_path / "emqx"), "--out", str(out)]) == 0
    paths = Paths(out / "config" / "bridge.conf", out / "rules")
    assert main(["check", "-c", str(paths.config), "-r", str(paths.rules)]) == 0
    bridge = Bridge.load(paths)
    await bridge.start()
    started.append(bridge)
    return bridge


async def test_redis_file_end_to_end(
    tmp_path: Path, imported: list[Bridge], redis_db: redis_sync.Redis, redis_port: int
) -> None:
    replace = {"server = 127.0.0.1:6379": f"server = 127.0.0.1:{redis_port}"}
    bridge = await _run_import(tmp_path, "emqx_backend_redis.conf", replace, imported)
    client = await Client(mqtt_port(bridge), "emqx44-dev", clean=False).connected()
    await client.publish("up/dev", b"hello", qos=1)
    await bridge.idle()
    assert redis_db.hget("mqtt:client:emqx44-dev", "state") == b"1"
    assert redis_db.hget(f"mqtt:node:{NODE}", "emqx44-dev") is not None
    ids = redis_db.zrange("mqtt:msg:up/dev", 0, -1)
    assert len(ids) == 1
    stored = redis_db.hgetall(b"mqtt:msg:" + ids[0])
    assert stored[b"payload"] == b"hello" and stored[b"topic"] == b"up/dev" and stored[b"from"] == b"emqx44-dev"
    # backend.redis.msg.expired_after = 3600 became the rule's expired_time
    assert 3500 < redis_db.ttl(b"mqtt:msg:" + ids[0]) <= 3600
    await client.disconnect()
    await bridge.idle()
    assert redis_db.hget("mqtt:client:emqx44-dev", "state") == b"0"


@pytest.fixture
async def pg() -> AsyncIterator[asyncpg.Connection]:
    start_postgres(PG_PORT)
    conn = await asyncpg.connect(postgres_dsn(PG_PORT))
    await conn.execute("DROP TABLE IF EXISTS mqtt_client, mqtt_sub, mqtt_msg, mqtt_topic, mqtt_retain, mqtt_acked")
    yield conn
    await conn.close()


async def test_pgsql_file_end_to_end(tmp_path: Path, imported: list[Bridge], pg: asyncpg.Connection) -> None:
    replace = {
        "server = 127.0.0.1:5432": f"server = 127.0.0.1:{PG_PORT}",
        "username = root": "username = hookbridge",
        "password = public": "password = hookbridge",
    }
    bridge = await _run_import(tmp_path, "emqx_backend_pgsql.conf", replace, imported)
    client = await Client(mqtt_port(bridge), "emqx44-pg", clean=False).connected()
    await client.publish("up/pg", b"row", qos=1)
    await client.publish("up/pg", b"retained", qos=1, retain=True)
    await bridge.idle()
    assert await pg.fetchval("SELECT state FROM mqtt_client WHERE clientid = 'emqx44-pg'") == 1
    rows = await pg.fetch("SELECT sender, topic, payload FROM mqtt_msg ORDER BY id")
    assert [(r["sender"], r["topic"], bytes(r["payload"])) for r in rows] == [
        ("emqx44-pg", "up/pg", b"row"),
        ("emqx44-pg", "up/pg", b"retained"),
    ]
    assert await pg.fetchval("SELECT count(*) FROM mqtt_retain WHERE topic = 'up/pg'") == 1
    await client.disconnect()
    await bridge.idle()
    assert await pg.fetchval("SELECT state FROM mqtt_client WHERE clientid = 'emqx44-pg'") == 0
