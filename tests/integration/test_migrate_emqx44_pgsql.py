"""`hookbridge migrate-emqx44 --pool pgsql.pool1` on a real PostgreSQL: the tables of EMQX 4.4
Enterprise's PostgreSQL backend page (etc/sql/emqx_backend_pgsql.sql), filled as EMQX would have,
migrated twice, then served by a bridge started from `import-emqx`'s output (embedded broker) in
one order with what hookbridge stores after the switch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bridge.cli import main
from bridge.msgid import hookbridge_id
from support.bridges import mqtt_port
from support.conf import config_text
from support.emqx44_import import import_emqx, imported_bridge, migrate
from support.emqx_ids import emqttd_base62, emqx_base62, guid, to_hexstr, to_hexstr_v2
from support.mqtt import Client
from support.services import postgres_dsn, start_postgres, stop_postgres

PORT = 5461  # this module's own server: it drops and creates the mqtt_* tables
POOL = (
    f"backend.pgsql.pool1.server = 127.0.0.1:{PORT}\nbackend.pgsql.pool1.username = hookbridge\n"
    "backend.pgsql.pool1.password = hookbridge\nbackend.pgsql.pool1.database = mqtt\n"
    "backend.pgsql.pool1.batch_time = 1ms\n"
)

# The tables as EMQX 4.4's PostgreSQL backend page gives them.
EMQX44_TABLES = """
CREATE TABLE mqtt_client(id SERIAL primary key, clientid character varying(100), state integer,
  node character varying(100), online_at timestamp, offline_at timestamp,
  created timestamp without time zone, UNIQUE (clientid));
CREATE TABLE mqtt_sub(id SERIAL primary key, clientid character varying(100), topic character varying(200),
  qos integer, created timestamp without time zone, UNIQUE (clientid, topic));
CREATE TABLE mqtt_msg (id SERIAL primary key, msgid character varying(60), sender character varying(100),
  topic character varying(200), qos integer, retain integer, payload text, arrived timestamp without time zone);
CREATE TABLE mqtt_retain(id SERIAL primary key, topic character varying(200), msgid character varying(60),
  sender character varying(100), qos integer, payload text, arrived timestamp without time zone, UNIQUE (topic));
CREATE TABLE mqtt_acked (id SERIAL primary key, clientid character varying(100), topic character varying(100),
  mid integer, created timestamp without time zone, UNIQUE (clientid, topic));
"""

# EMQX's msgids, one hour ago, one second apart (its guid: 64-bit µs time, 48 bits node, 16 seq)


def emqx_id(seconds_ago: int, seq: int, encode: Callable[[int], str] = to_hexstr_v2) -> str:
    ts_us = (int(time.time()) - seconds_ago) * 1_000_000
    return encode(guid(ts_us, 0x0A0B0C0D0E0F, seq))


def emqx_hex(seconds_ago: int, seq: int) -> str:
    return emqx_id(seconds_ago, seq)  # no padding, as EMQ X 2.x wrote it


# One queue holding the forms EMQX wrote: 4.x emqx_base62 (what its backends wrote), 2.x base62, 32 hex
QUEUE_FORMS = [emqx_base62, emqttd_base62, to_hexstr]


@pytest.fixture(scope="module")
def pg_port() -> Iterator[int]:
    start_postgres(PORT)
    yield PORT
    stop_postgres(PORT)


@pytest.fixture
async def emqx_tables(pg_port: int) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(postgres_dsn(pg_port))
    await conn.execute(
        "DROP TABLE IF EXISTS mqtt_client, mqtt_sub, mqtt_msg, mqtt_retain, mqtt_acked, mqtt_topic, mqtt_event_log"
    )
    await conn.execute(EMQX44_TABLES)
    await conn.execute(
        "INSERT INTO mqtt_client (clientid, state, node, online_at, offline_at, created)"
        " VALUES ('dev1', 0, 'emqx@127.0.0.1', now() - interval '2h', now() - interval '1h', now())"
    )
    await conn.execute("INSERT INTO mqtt_sub (clientid, topic, qos) VALUES ('dev1', 'proxy/dev1', 1)")
    ids = [emqx_id(3600 - n, n, encode) for n, encode in enumerate(QUEUE_FORMS)]
    for n, msgid in enumerate(ids):
        await conn.execute(
            "INSERT INTO mqtt_msg (msgid, sender, topic, qos, retain, payload, arrived)"
            " VALUES ($1, 'emqx-pub', 'pubsub/t', 1, 0, $2, now() - interval '1h')",
            msgid,
            f"e{n + 1}",
        )
    first = await conn.fetchval("SELECT id FROM mqtt_msg WHERE payload = 'e1'")
    await conn.execute("INSERT INTO mqtt_acked (clientid, topic, mid) VALUES ('dev1', 'pubsub/t', $1)", first)
    await conn.execute(
        "INSERT INTO mqtt_retain (topic, msgid, sender, qos, payload, arrived)"
        " VALUES ('status/x', $1, 'emqx-pub', 1, 'retained-by-emqx', now() - interval '1h')",
        emqx_id(3000, 7, emqx_base62),
    )
    yield conn
    await conn.close()


IMPORT = {
    "server = 127.0.0.1:5432": f"server = 127.0.0.1:{PORT}",
    "username = root": "username = hookbridge",
    "password = public": "password = hookbridge",
}


async def test_tables_migrate_then_a_bridge_serves_them_in_order(
    tmp_path: Path,
    emqx_tables: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As a user switches: import-emqx of EMQX's emqx_backend_pgsql.conf, migrate-emqx44 with the
    config it wrote (dry run, then twice), a bridge of that config and rules."""
    conn = emqx_tables
    paths = import_emqx(tmp_path, "emqx_backend_pgsql.conf", IMPORT)
    capsys.readouterr()
    assert await migrate(paths, "pgsql.pool1", "--dry-run") == 0
    report = capsys.readouterr().out
    assert (
        "mqtt_msg: 1 emqx_base62 of the decimal text (EMQX 3.x/4.x), 1 positional base62 (EMQ X 2.x), 1 32 hex;"
        in report
    )
    assert "mqtt_retain: 1 emqx_base62 of the decimal text (EMQX 3.x/4.x);" in report
    assert (
        await conn.fetchval(
            "SELECT data_type FROM information_schema.columns WHERE table_name = 'mqtt_msg' AND column_name = 'payload'"
        )
        == "text"
    )
    for _ in range(2):
        assert await migrate(paths, "pgsql.pool1") == 0
    offset = await conn.fetchrow("SELECT msgid, mid FROM mqtt_acked WHERE clientid = 'dev1'")
    e1 = await conn.fetchrow("SELECT id, msgid FROM mqtt_msg WHERE payload = 'e1'::bytea")
    assert offset["msgid"] == e1["msgid"] and len(e1["msgid"]) == 32 and offset["mid"] == e1["id"]
    assert await conn.fetchval("SELECT count(*) FROM mqtt_topic") == 1

    async with imported_bridge(paths, tmp_path, monkeypatch) as bridge:
        await serve(bridge, conn, e1["msgid"])


async def serve(bridge: Any, conn: asyncpg.Connection, e1: str) -> None:
    port = mqtt_port(bridge)
    publisher = await Client(port, "hb-pub").connected()
    await publisher.publish("pubsub/t", b"h4", qos=1)  # stored by hookbridge after the switch
    await bridge.idle()
    ours = await conn.fetchval("SELECT msgid FROM mqtt_msg WHERE payload = 'h4'::bytea")
    assert ours > e1

    dev1 = await Client(port, "dev1", clean=False).connected()
    await dev1.subscribe("pubsub/t", qos=1)
    assert [m.payload for m in await dev1.expect(3)] == [b"e2", b"e3", b"h4"]
    await publisher.publish("proxy/dev1", b"to-proxy", qos=1)  # the proxy subscription EMQX had
    assert [m.payload for m in await dev1.expect(1)] == [b"to-proxy"]

    async def online() -> bool:
        return bool(await conn.fetchval("SELECT state FROM mqtt_client WHERE clientid = 'dev1'") == 1)

    for _ in range(100):
        if await online():
            break
        await asyncio.sleep(0.05)
    assert await online()

    fresh = await Client(port, "fresh").connected()
    await fresh.subscribe("status/#", qos=1)
    got = await fresh.expect(1)
    assert got[0].payload == b"retained-by-emqx" and got[0].retain
    for client in (dev1, fresh, publisher):
        await client.disconnect()


def test_emqx_hex_ids_without_padding_become_hookbridge_ids() -> None:
    short = emqx_hex(0, 1)
    assert len(short) < 32 and hookbridge_id(short.encode()) == short.rjust(32, "0")


async def test_a_msgid_that_is_no_id_stops_it_before_anything_changes(
    tmp_path: Path, emqx_tables: asyncpg.Connection, capsys: pytest.CaptureFixture[str]
) -> None:
    conn = emqx_tables
    bad = await conn.fetchval(
        "INSERT INTO mqtt_msg (msgid, sender, topic, qos, retain, payload, arrived)"
        " VALUES ('not-an-id', 'emqx-pub', 'pubsub/t', 1, 0, 'bad', now()) RETURNING id"
    )

    async def state() -> list[Any]:
        columns = await conn.fetch(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = current_schema() ORDER BY 1, 2"
        )
        rows = await conn.fetch("SELECT id, msgid, payload FROM mqtt_msg ORDER BY id")
        return [*map(tuple, columns), *map(tuple, rows)]

    before = await state()
    conf = tmp_path / "migrate.conf"
    conf.write_text(config_text(pools=POOL))
    assert await asyncio.to_thread(main, ["migrate-emqx44", "-c", str(conf), "--pool", "pgsql.pool1"]) == 2
    err = capsys.readouterr().err
    assert f"mqtt_msg row id {bad}: 'not-an-id'" in err and "nothing was changed" in err
    assert await state() == before
