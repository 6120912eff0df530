"""MySQL-only behaviour: schema command, sql and template actions, `%` in statements, EMQX 4's
`user` setting, last-writer-wins, expiry, and a wrong password refused at start."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncmy
import pytest

from actions.mysql.backend import format_markers
from bridge.events import ClientConnected, ClientDisconnected
from support.bridges import BridgeFactory, eventually, mqtt_port
from support.mqtt import Client
from support.services import ROOT, start_mariadb, stop_mariadb

PORT = 3307
POOL = (
    f"backend.mysql.pool1.server = 127.0.0.1:{PORT}\nbackend.mysql.pool1.username = hookbridge\n"
    "backend.mysql.pool1.password = hookbridge\nbackend.mysql.pool1.database = mqtt\n"
)
TABLES = "mqtt_client, mqtt_sub, mqtt_msg, mqtt_topic, mqtt_retain, mqtt_acked, mqtt_event_log, audit"


class My:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        async with self.conn.cursor() as cursor:
            await cursor.execute(sql, args)
            return list(await cursor.fetchall())

    async def value(self, sql: str, *args: Any) -> Any:
        return (await self.rows(sql, *args))[0][0]


@pytest.fixture
async def my() -> AsyncIterator[My]:
    start_mariadb(PORT)
    conn = await asyncmy.connect(
        host="127.0.0.1", port=PORT, user="hookbridge", password="hookbridge", db="mqtt", autocommit=True
    )
    db = My(conn)
    await db.rows(f"DROP TABLE IF EXISTS {TABLES}")
    yield db
    conn.close()


def test_markers_become_the_drivers_paramstyle_and_percent_signs_stay_literal() -> None:
    compiled = "select '$1 %', x from t where a = $1 and b like 'a%''$2' and c = $2 and d % 2 = $10"
    expected = "select '$1 %%', x from t where a = %s and b like 'a%%''$2' and c = %s and d %% 2 = %s"
    assert format_markers(compiled) == expected


async def test_schema_command_applies_idempotently(my: My, tmp_path: Path) -> None:
    (tmp_path / "bridge.conf").write_text(POOL)
    command = [sys.executable, "-m", "bridge", "schema", "-c", "bridge.conf", "--pool", "mysql.pool1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = functools.partial(subprocess.run, cwd=tmp_path, capture_output=True, text=True, env=env, check=True)
    printed = await asyncio.to_thread(run, command)
    assert "CREATE TABLE IF NOT EXISTS mqtt_msg" in printed.stdout
    assert "payload longblob" in printed.stdout
    expected = {"mqtt_client", "mqtt_sub", "mqtt_msg", "mqtt_topic", "mqtt_retain", "mqtt_acked", "mqtt_event_log"}
    assert not expected & {row[0] for row in await my.rows("SHOW TABLES")}  # printing creates nothing
    for _ in range(2):  # applying twice is safe
        await asyncio.to_thread(run, [*command, "--apply"])
    assert expected <= {row[0] for row in await my.rows("SHOW TABLES")}
    # topics differing only by a trailing space are two topics (a NO PAD binary collation)
    await my.rows("INSERT INTO mqtt_topic VALUES ('a'), ('a '), ('A')")
    assert await my.value("SELECT count(*) FROM mqtt_topic WHERE topic = 'a'") == 1


SQL_RULES = """
backend.mysql.hook.message.publish.1 = {"topic": "#", "action": {"sql": ["insert into audit (who, topic, body, level, at, raw) values (${clientid}, '${topic}', ${payload.text}, ${payload.level}, FROM_UNIXTIME(${timestamp} / 1000), ${payload})", "update audit set seen = true, note = '100% seen' where who = ${clientid} and topic like 't/%'"]}}
backend.mysql.hook.message.publish.2 = {"topic": "#", "action": {"template": "mysql/audit.j2"}}
"""
AUDIT_TEMPLATE = """{% if json and json.level is number and json.level >= 3 %}
insert into audit (who, topic, body, level, at, raw, note) values ('{{ clientid }}', {{ topic }}, 'alarm', {{ json.level }}, FROM_UNIXTIME({{ timestamp }} / 1000), {{ payload }}, '50%');
{% endif %}
"""


async def test_sql_and_template_actions_bind_every_value(make_bridge: BridgeFactory, my: My) -> None:
    await my.rows(
        "CREATE TABLE audit (who text, topic text, body text, level int, at datetime(6), raw longblob,"
        " seen boolean, note text)"
    )
    bridge = await make_bridge(SQL_RULES, pools=POOL, templates={"mysql/audit.j2": AUDIT_TEMPLATE})
    evil = "x'); DROP TABLE audit; -- \\' %s"
    client = await Client(mqtt_port(bridge), evil).connected()
    payload = b'{"text": "it\'s \\"quoted\\"; DELETE FROM audit \\\\", "level": 5}'
    before = time.time()
    await client.publish(f"t/{evil}", payload, qos=1)
    await client.publish("t/plain", b"\xff\xfe\x00 not json", qos=1)
    await client.disconnect()
    await bridge.idle()
    rows = await my.rows("SELECT who, topic, body, level, UNIX_TIMESTAMP(at), raw, seen, note FROM audit")
    assert sorted((r[0], r[1], r[2] or "", r[3] or 0, bytes(r[5])) for r in rows) == sorted(
        [
            (evil, f"t/{evil}", 'it\'s "quoted"; DELETE FROM audit \\', 5, payload),
            (evil, f"t/{evil}", "alarm", 5, payload),  # from the template
            (evil, "t/plain", "", 0, b"\xff\xfe\x00 not json"),  # a missing ${payload.x} is NULL
        ]
    )
    assert await my.value("SELECT count(*) FROM audit WHERE body IS NULL AND level IS NULL") == 1
    assert all(r[6] for r in rows)  # the rule's second statement ran after its first
    assert sorted(r[7] for r in rows) == ["100% seen", "100% seen", "100% seen"]  # the template's '50%' updated too
    assert all(before - 1 <= float(r[4]) <= time.time() for r in rows)
    assert bridge.metrics.rules["mysql.message.publish.1"]["failed"] == 0


async def test_sql_action_statements_share_one_transaction(make_bridge: BridgeFactory, my: My) -> None:
    await my.rows("CREATE TABLE audit (who varchar(64) PRIMARY KEY)")
    rules = (
        'backend.mysql.hook.client.connected.1 = {"action": {"sql": ['
        '"insert into audit (who) values (${clientid})", "insert into audit (who) values (${clientid})"]}}\n'
        'backend.mysql.hook.client.connected.2 = {"action": {"function": "on_client_connected"}}\n'
    )
    bridge = await make_bridge(rules, pools=POOL)
    client = await Client(mqtt_port(bridge), "twice").connected()
    await bridge.idle()
    assert await my.value("SELECT count(*) FROM audit") == 0  # the second insert failed: both rolled back
    assert bridge.metrics.rules["mysql.client.connected.1"]["failed"] == 1
    assert await my.value("SELECT state FROM mqtt_client WHERE clientid = 'twice'") == 1  # others unaffected
    await client.disconnect()


async def test_late_connected_does_not_overwrite_newer_disconnected(make_bridge: BridgeFactory, my: My) -> None:
    rules = (
        'backend.mysql.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n'
        'backend.mysql.hook.client.disconnected.1 = {"action": {"function": "on_client_disconnected"}}\n'
    )
    bridge = await make_bridge(rules, pools=POOL)
    now = time.time()
    await bridge.dispatcher(ClientDisconnected("dev", None, "n", "p", "normal", now))
    await bridge.dispatcher(ClientConnected("dev", None, "n", "p", now - 5))  # arrives late, happened earlier
    await bridge.idle()
    state, online_at, offline_at = (
        await my.rows("SELECT state, online_at, UNIX_TIMESTAMP(offline_at) FROM mqtt_client WHERE clientid = 'dev'")
    )[0]
    assert (state, online_at) == (0, None)
    assert abs(float(offline_at) - now) < 0.01  # UNIX_TIMESTAMP in the session's zone: stored as UTC


async def test_expired_messages_are_deleted_periodically(make_bridge: BridgeFactory, my: My) -> None:
    rules = (
        'backend.mysql.hook.message.publish.1 = {"topic": "t/short/#", "action": {"function": "on_message_publish"}, '
        '"expired_time": 1}\n'
        'backend.mysql.hook.message.publish.2 = {"topic": "t/long/#", "action": {"function": "on_message_publish"}, '
        '"expired_time": 3600}\n'
    )
    bridge = await make_bridge(rules, pools=POOL, extra_config="backend.mysql.pool1.trim_interval = 300ms\n")
    client = await Client(mqtt_port(bridge), "pub").connected()
    await client.publish("t/short/x", b"short-lived", qos=1)
    await client.publish("t/long/x", b"long-lived", qos=1)
    await bridge.idle()
    # stored (the backend acknowledged it); whether it is still there is a race with its 1 s, not asserted
    assert bridge.metrics.rules["mysql.message.publish.1"]["succeeded"] == 1
    await eventually(
        lambda: my.value("SELECT count(*) FROM mqtt_msg WHERE topic = %s", "t/short/x"), lambda n: n == 0, timeout=10
    )
    assert (
        await my.value("SELECT count(*) FROM mqtt_msg WHERE topic = %s", "t/long/x") == 1
    )  # only what expired is deleted
    await client.disconnect()


async def test_a_wrong_password_stops_the_start_without_showing_it(make_bridge: BridgeFactory, my: My) -> None:
    pool = POOL.replace("password = hookbridge", "password = not-the-Secret-42")
    rules = 'backend.mysql.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n'
    with pytest.raises(Exception, match="Access denied") as caught:
        await make_bridge(rules, pools=pool)
    assert "not-the-Secret-42" not in str(caught.value)


async def test_bridge_starts_while_mysql_is_down_and_catches_up(make_bridge: BridgeFactory) -> None:
    """No schema, no server at start: actions wait, then the schema and the rows arrive."""
    port = 3308
    await asyncio.to_thread(start_mariadb, port)  # create the server's data once, then take it away

    async def connect() -> My:
        conn = await asyncmy.connect(
            host="127.0.0.1", port=port, user="hookbridge", password="hookbridge", db="mqtt", autocommit=True
        )
        return My(conn)

    db = await connect()
    await db.rows(f"DROP TABLE IF EXISTS {TABLES}")
    db.conn.close()
    await asyncio.to_thread(stop_mariadb, port)
    pools = POOL.replace(f":{PORT}\n", f":{port}\n") + "backend.mysql.pool1.retry_backoff_max = 300ms\n"
    rules = 'backend.mysql.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n'
    bridge = await make_bridge(rules, pools=pools)
    client = await Client(mqtt_port(bridge), "early").connected()
    await asyncio.sleep(1)
    assert not bridge.health()[0]
    try:
        await asyncio.to_thread(start_mariadb, port)
        await asyncio.wait_for(bridge.idle(), 30)
        db = await connect()
        assert await db.value("SELECT state FROM mqtt_client WHERE clientid = 'early'") == 1
        db.conn.close()
        assert bridge.health()[0]
    finally:
        await client.disconnect()
        await asyncio.to_thread(stop_mariadb, port)
