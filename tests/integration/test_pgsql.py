"""PostgreSQL-only behaviour: schema command, sql and template actions, last-writer-wins, expiry, index use."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from actions.pgsql.reads import _PAGE
from bridge.events import ClientConnected, ClientDisconnected
from support.bridges import BridgeFactory, eventually, mqtt_port
from support.mqtt import Client
from support.services import ROOT, postgres_dsn, start_postgres

PORT = 5439
POOL = (
    f"backend.pgsql.pool1.server = 127.0.0.1:{PORT}\nbackend.pgsql.pool1.username = hookbridge\n"
    "backend.pgsql.pool1.password = hookbridge\nbackend.pgsql.pool1.database = mqtt\n"
)
TABLES = "mqtt_client, mqtt_sub, mqtt_msg, mqtt_topic, mqtt_retain, mqtt_acked, mqtt_event_log, audit"


@pytest.fixture
async def pg() -> AsyncIterator[asyncpg.Connection]:
    start_postgres(PORT)
    conn = await asyncpg.connect(postgres_dsn(PORT))
    await conn.execute(f"DROP TABLE IF EXISTS {TABLES}")
    yield conn
    await conn.close()


async def tables(conn: asyncpg.Connection) -> set[str]:
    rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    return {row["tablename"] for row in rows}


async def test_schema_command_applies_idempotently(pg: asyncpg.Connection, tmp_path: Path) -> None:
    (tmp_path / "bridge.conf").write_text(POOL)
    command = [sys.executable, "-m", "bridge", "schema", "-c", "bridge.conf", "--pool", "pgsql.pool1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = functools.partial(subprocess.run, cwd=tmp_path, capture_output=True, text=True, env=env, check=True)
    printed = await asyncio.to_thread(run, command)
    assert "CREATE TABLE IF NOT EXISTS mqtt_msg" in printed.stdout
    assert await tables(pg) == set()  # printing creates nothing
    for _ in range(2):  # applying twice is safe
        await asyncio.to_thread(run, [*command, "--apply"])
    expected = {"mqtt_client", "mqtt_sub", "mqtt_msg", "mqtt_topic", "mqtt_retain", "mqtt_acked", "mqtt_event_log"}
    assert expected <= await tables(pg)


SQL_RULES = """
backend.pgsql.hook.message.publish.1 = {"topic": "#", "action": {"sql": ["insert into audit (who, topic, body, level, at, raw) values (${clientid}, '${topic}', ${payload.text}, ${payload.level}, ${timestamp}, ${payload})", "update audit set seen = true where who = ${clientid}"]}}
backend.pgsql.hook.message.publish.2 = {"topic": "#", "action": {"template": "pgsql/audit.j2"}}
"""
AUDIT_TEMPLATE = """{% if json and json.level is number and json.level >= 3 %}
insert into audit (who, topic, body, level, at, raw) values ('{{ clientid }}', {{ topic }}, 'alarm', {{ json.level }}, {{ timestamp }}, {{ payload }});
{% endif %}
"""


async def test_sql_and_template_actions_bind_every_value(make_bridge: BridgeFactory, pg: asyncpg.Connection) -> None:
    await pg.execute(
        "CREATE TABLE audit (who text, topic text, body text, level int, at timestamptz, raw bytea, seen boolean)"
    )
    bridge = await make_bridge(SQL_RULES, pools=POOL, templates={"pgsql/audit.j2": AUDIT_TEMPLATE})
    evil = "x'); DROP TABLE audit; --"
    client = await Client(mqtt_port(bridge), evil).connected()
    payload = b'{"text": "it\'s \\"quoted\\"; DELETE FROM audit", "level": 5}'
    before = time.time()
    await client.publish(f"t/{evil}", payload, qos=1)
    await client.publish("t/plain", b"\xff\xfe not json", qos=1)
    await client.disconnect()
    await bridge.idle()
    rows = await pg.fetch("SELECT who, topic, body, level, at, raw, seen FROM audit")
    assert sorted((r["who"], r["topic"], r["body"] or "", r["level"] or 0, bytes(r["raw"])) for r in rows) == sorted(
        [
            (evil, f"t/{evil}", 'it\'s "quoted"; DELETE FROM audit', 5, payload),
            (evil, f"t/{evil}", "alarm", 5, payload),  # from the template
            (evil, "t/plain", "", 0, b"\xff\xfe not json"),  # a missing ${payload.x} is NULL
        ]
    )
    assert await pg.fetchval("SELECT count(*) FROM audit WHERE body IS NULL AND level IS NULL") == 1
    assert all(r["seen"] for r in rows)  # the rule's second statement ran after its first
    assert all(before - 1 <= r["at"].timestamp() <= time.time() for r in rows)
    assert bridge.metrics.rules["pgsql.message.publish.1"]["failed"] == 0


async def test_sql_action_statements_share_one_transaction(make_bridge: BridgeFactory, pg: asyncpg.Connection) -> None:
    await pg.execute("CREATE TABLE audit (who text PRIMARY KEY)")
    rules = (
        'backend.pgsql.hook.client.connected.1 = {"action": {"sql": ['
        '"insert into audit (who) values (${clientid})", "insert into audit (who) values (${clientid})"]}}\n'
        'backend.pgsql.hook.client.connected.2 = {"action": {"function": "on_client_connected"}}\n'
    )
    bridge = await make_bridge(rules, pools=POOL)
    client = await Client(mqtt_port(bridge), "twice").connected()
    await bridge.idle()
    assert await pg.fetchval("SELECT count(*) FROM audit") == 0  # the second insert failed: both rolled back
    assert bridge.metrics.rules["pgsql.client.connected.1"]["failed"] == 1
    assert await pg.fetchval("SELECT state FROM mqtt_client WHERE clientid = 'twice'") == 1  # others unaffected
    await client.disconnect()


async def test_late_connected_does_not_overwrite_newer_disconnected(
    make_bridge: BridgeFactory, pg: asyncpg.Connection
) -> None:
    rules = (
        'backend.pgsql.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n'
        'backend.pgsql.hook.client.disconnected.1 = {"action": {"function": "on_client_disconnected"}}\n'
    )
    bridge = await make_bridge(rules, pools=POOL)
    now = time.time()
    await bridge.dispatcher(ClientDisconnected("dev", None, "n", "p", "normal", now))
    await bridge.dispatcher(ClientConnected("dev", None, "n", "p", now - 5))  # arrives late, happened earlier
    await bridge.idle()
    row = await pg.fetchrow("SELECT state, online_at, offline_at FROM mqtt_client WHERE clientid = 'dev'")
    assert row["state"] == 0
    assert row["online_at"] is None
    assert abs(row["offline_at"].timestamp() - now) < 0.01


async def test_expired_messages_are_deleted_periodically(make_bridge: BridgeFactory, pg: asyncpg.Connection) -> None:
    rules = (
        'backend.pgsql.hook.message.publish.1 = {"topic": "t/short/#", "action": {"function": "on_message_publish"}, '
        '"expired_time": 1}\n'
        'backend.pgsql.hook.message.publish.2 = {"topic": "t/long/#", "action": {"function": "on_message_publish"}, '
        '"expired_time": 3600}\n'
    )
    bridge = await make_bridge(rules, pools=POOL, extra_config="backend.pgsql.pool1.trim_interval = 300ms\n")
    client = await Client(mqtt_port(bridge), "pub").connected()
    await client.publish("t/short/x", b"short-lived", qos=1)
    await client.publish("t/long/x", b"long-lived", qos=1)
    await bridge.idle()
    # stored (the backend acknowledged it); whether it is still there is a race with its 1 s, not asserted
    assert bridge.metrics.rules["pgsql.message.publish.1"]["succeeded"] == 1
    await eventually(
        lambda: pg.fetchval("SELECT count(*) FROM mqtt_msg WHERE topic = $1", "t/short/x"), lambda n: n == 0, timeout=10
    )
    assert (
        await pg.fetchval("SELECT count(*) FROM mqtt_msg WHERE topic = $1", "t/long/x") == 1
    )  # only what expired is deleted
    await client.disconnect()


async def test_fetch_and_retain_lookup_use_indexes(make_bridge: BridgeFactory, pg: asyncpg.Connection) -> None:
    bridge = await make_bridge(
        'backend.pgsql.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n', pools=POOL
    )  # creates the schema
    await pg.execute(
        "INSERT INTO mqtt_msg (msgid, sender, topic, qos, payload, arrived) "
        "SELECT lpad(to_hex(n), 32, '0'), 'c', 'fleet/' || (n % 200) || '/temp', 1, '\\x00', now() "
        "FROM generate_series(1, 50000) AS n"
    )
    await pg.execute("INSERT INTO mqtt_topic SELECT DISTINCT topic FROM mqtt_msg")
    await pg.execute("ANALYZE")
    plan = "\n".join(
        r[0]
        for r in await pg.fetch(
            "EXPLAIN " + _PAGE, ["fleet/7/temp", "fleet/8/temp"], "", "G", dt.datetime.min.replace(tzinfo=dt.UTC), 101
        )
    )
    assert "Index Scan using mqtt_msg_topic_msgid on mqtt_msg" in plan
    assert "Seq Scan on mqtt_msg" not in plan
    assert bridge.runners["pgsql.pool1"].healthy
