"""`hookbridge migrate-emqx44 --pool mysql.pool1` on a real MariaDB: the tables of EMQX 4.4
Enterprise's MySQL backend page (etc/sql/emqx_backend_mysql.sql), filled as EMQX would have,
migrated twice and after an interruption, then served by a bridge started from `import-emqx`'s
output (embedded broker) in one order with what hookbridge stores after the switch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncmy
import pytest

from actions.mysql.emqx44 import _create
from bridge.cli import main
from bridge.emqx_msgid import convert
from support.bridges import mqtt_port
from support.conf import config_text
from support.emqx44_import import import_emqx, imported_bridge, migrate
from support.emqx_ids import emqttd_base62, emqx_base62, guid, to_hexstr, to_hexstr_v2
from support.mqtt import Client
from support.services import start_mariadb, stop_mariadb

PORT = 3361  # this module's own server: it drops and creates the mqtt_* tables
POOL = (
    f"backend.mysql.pool1.server = 127.0.0.1:{PORT}\nbackend.mysql.pool1.username = hookbridge\n"
    "backend.mysql.pool1.password = hookbridge\nbackend.mysql.pool1.database = mqtt\n"
    "backend.mysql.pool1.batch_time = 1ms\n"
)

# The tables as EMQX 4.4's MySQL backend page gives them.
EMQX44_TABLES = [
    """CREATE TABLE mqtt_client (id int(11) unsigned NOT NULL AUTO_INCREMENT, clientid varchar(64) DEFAULT NULL,
  state varchar(3) DEFAULT NULL, node varchar(100) DEFAULT NULL, online_at datetime DEFAULT NULL,
  offline_at datetime DEFAULT NULL, created timestamp NULL DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (id),
  KEY mqtt_client_idx (clientid), UNIQUE KEY mqtt_client_key (clientid)) ENGINE=InnoDB DEFAULT CHARSET=utf8""",
    """CREATE TABLE mqtt_sub (id int(11) unsigned NOT NULL AUTO_INCREMENT, clientid varchar(64) DEFAULT NULL,
  topic varchar(255) DEFAULT NULL, qos int(3) DEFAULT NULL, created timestamp NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (id), KEY mqtt_sub_idx (clientid, topic(255), qos), UNIQUE KEY mqtt_sub_key (clientid, topic))
  ENGINE=InnoDB DEFAULT CHARSET=utf8""",
    """CREATE TABLE mqtt_msg (id int(11) unsigned NOT NULL AUTO_INCREMENT, msgid varchar(100) DEFAULT NULL,
  topic varchar(1024) NOT NULL, sender varchar(1024) DEFAULT NULL, node varchar(60) DEFAULT NULL,
  qos int(11) NOT NULL DEFAULT '0', retain tinyint(2) DEFAULT NULL, payload blob, arrived datetime NOT NULL,
  PRIMARY KEY (id)) ENGINE=InnoDB DEFAULT CHARSET=utf8""",
    """CREATE TABLE mqtt_retain (id int(11) unsigned NOT NULL AUTO_INCREMENT, topic varchar(200) DEFAULT NULL,
  msgid varchar(60) DEFAULT NULL, sender varchar(100) DEFAULT NULL, node varchar(100) DEFAULT NULL,
  qos int(2) DEFAULT NULL, payload blob, arrived timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (id),
  UNIQUE KEY mqtt_retain_key (topic)) ENGINE=InnoDB DEFAULT CHARSET=utf8""",
    """CREATE TABLE mqtt_acked (id int(11) unsigned NOT NULL AUTO_INCREMENT, clientid varchar(200) DEFAULT NULL,
  topic varchar(200) DEFAULT NULL, mid int(200) DEFAULT NULL, created timestamp NULL DEFAULT NULL,
  PRIMARY KEY (id), UNIQUE KEY mqtt_acked_key (clientid, topic)) ENGINE=InnoDB DEFAULT CHARSET=utf8""",
]
ALL = ("mqtt_client", "mqtt_sub", "mqtt_msg", "mqtt_retain", "mqtt_acked", "mqtt_topic", "mqtt_event_log")


def emqx_id(seconds_ago: int, seq: int, encode: Callable[[int], str] = to_hexstr_v2) -> str:
    ts_us = (int(time.time()) - seconds_ago) * 1_000_000
    return encode(guid(ts_us, 0x0A0B0C0D0E0F, seq))


# One queue holding the forms EMQX wrote: 4.x emqx_base62 (what its backends wrote), 2.x base62, 32 hex
QUEUE_FORMS = [emqx_base62, emqttd_base62, to_hexstr]


async def run(conn: Any, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
    async with conn.cursor() as cursor:
        await cursor.execute(sql, args)
        return list(await cursor.fetchall())


@pytest.fixture(scope="module")
def my_port() -> Iterator[int]:
    start_mariadb(PORT)
    yield PORT
    stop_mariadb(PORT)


@pytest.fixture
async def emqx_tables(my_port: int) -> AsyncIterator[Any]:
    conn = await asyncmy.connect(
        host="127.0.0.1", port=my_port, user="hookbridge", password="hookbridge", db="mqtt", autocommit=True
    )
    names = ", ".join([*ALL, *(f"{t}__emqx44" for t in ALL), *(f"{t}__hookbridge" for t in ALL)])
    await run(conn, f"DROP TABLE IF EXISTS {names}")
    for statement in EMQX44_TABLES:
        await run(conn, statement)
    await run(
        conn,
        "INSERT INTO mqtt_client (clientid, state, node, online_at, offline_at)"
        " VALUES ('dev1', '0', 'emqx@127.0.0.1', NOW() - INTERVAL 2 HOUR, NOW() - INTERVAL 1 HOUR)",
    )
    await run(conn, "INSERT INTO mqtt_sub (clientid, topic, qos) VALUES ('dev1', 'proxy/dev1', 1)")
    for n in range(3):
        await run(
            conn,
            "INSERT INTO mqtt_msg (msgid, topic, sender, node, qos, retain, payload, arrived)"
            " VALUES (%s, 'pubsub/t', 'emqx-pub', 'emqx@127.0.0.1', 1, 0, %s, NOW() - INTERVAL 1 HOUR)",
            (emqx_id(3600 - n, n, QUEUE_FORMS[n]), f"e{n + 1}".encode()),
        )
    first = (await run(conn, "SELECT id FROM mqtt_msg WHERE payload = 'e1'"))[0][0]
    await run(conn, "INSERT INTO mqtt_acked (clientid, topic, mid) VALUES ('dev1', 'pubsub/t', %s)", (first,))
    await run(
        conn,
        "INSERT INTO mqtt_retain (topic, msgid, sender, qos, payload) VALUES ('status/x', %s, 'emqx-pub', 1, %s)",
        (emqx_id(3000, 7, emqx_base62), b"retained-by-emqx"),
    )
    yield conn
    conn.close()


IMPORT = {
    "server = 127.0.0.1:3306": f"server = 127.0.0.1:{PORT}",
    "user = root": "user = hookbridge",
    "password = public": "password = hookbridge",
}


async def test_tables_migrate_then_a_bridge_serves_them_in_order(
    tmp_path: Path, emqx_tables: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As a user switches: import-emqx of EMQX's emqx_backend_mysql.conf, migrate-emqx44 with the
    config it wrote (dry run, interrupted, then twice), a bridge of that config and rules."""
    conn = emqx_tables
    paths = import_emqx(tmp_path, "emqx_backend_mysql.conf", IMPORT)
    capsys.readouterr()
    assert await migrate(paths, "mysql.pool1", "--dry-run") == 0
    report = capsys.readouterr().out
    assert (
        "mqtt_msg: 1 emqx_base62 of the decimal text (EMQX 3.x/4.x), 1 positional base62 (EMQ X 2.x), 1 32 hex"
        in report
    )
    assert "mqtt_retain: 1 emqx_base62 of the decimal text (EMQX 3.x/4.x)" in report
    assert not await run(conn, "SHOW TABLES LIKE 'mqtt_msg__emqx44'")
    # Stopped during mqtt_msg's copy (its new table made, one row of three copied, no swap yet):
    # the next run copies the rest and swaps.
    await run(conn, _create("mqtt_msg", "utf8mb4_nopad_bin"))  # the test server is MariaDB
    ((emqx_e1,),) = await run(conn, "SELECT msgid FROM mqtt_msg WHERE payload = 'e1'")
    await run(
        conn,
        "INSERT INTO mqtt_msg__hookbridge (msgid, sender, topic, qos, retain, payload, arrived)"
        " VALUES (%s, 'emqx-pub', 'pubsub/t', 1, 0, 'e1', UTC_TIMESTAMP(6) - INTERVAL 1 HOUR)",
        (convert(emqx_e1)[1],),
    )
    assert (await run(conn, "SELECT COUNT(*) FROM mqtt_msg__hookbridge"))[0][0] == 1
    for _ in range(2):
        assert await migrate(paths, "mysql.pool1") == 0
    assert await run(conn, "SHOW TABLES LIKE 'mqtt_msg__emqx44'")
    (offset,) = await run(conn, "SELECT msgid, mid FROM mqtt_acked WHERE clientid = 'dev1'")
    (e1,) = await run(conn, "SELECT id, msgid FROM mqtt_msg WHERE payload = 'e1'")
    assert offset == (e1[1], e1[0]) and len(e1[1]) == 32
    assert (await run(conn, "SELECT COUNT(*) FROM mqtt_topic"))[0][0] == 1

    async with imported_bridge(paths, tmp_path, monkeypatch) as bridge:
        await serve(bridge)


async def serve(bridge: Any) -> None:
    port = mqtt_port(bridge)
    publisher = await Client(port, "hb-pub").connected()
    await publisher.publish("pubsub/t", b"h4", qos=1)  # stored by hookbridge after the switch
    await bridge.idle()
    dev1 = await Client(port, "dev1", clean=False).connected()
    await dev1.subscribe("pubsub/t", qos=1)
    assert [m.payload for m in await dev1.expect(3)] == [b"e2", b"e3", b"h4"]
    await publisher.publish("proxy/dev1", b"to-proxy", qos=1)  # the proxy subscription EMQX had
    assert [m.payload for m in await dev1.expect(1)] == [b"to-proxy"]
    fresh = await Client(port, "fresh").connected()
    await fresh.subscribe("status/#", qos=1)
    got = await fresh.expect(1)
    assert got[0].payload == b"retained-by-emqx" and got[0].retain
    for client in (dev1, fresh, publisher):
        await client.disconnect()


@pytest.mark.parametrize(
    ("insert", "named"),
    [
        (
            "INSERT INTO mqtt_retain (topic, msgid, sender, qos, payload) VALUES ('status/bad', 'no id', 'emqx-pub', 1, 'x')",
            "mqtt_retain topic status/bad: 'no id'",
        ),
        # a row the copy could not key (the old migration left it behind without a word)
        ("INSERT INTO mqtt_sub (id, clientid, topic, qos) VALUES (77, NULL, 'a/b', 1)", "mqtt_sub id 77: no clientid"),
    ],
)
async def test_a_msgid_that_is_no_id_stops_it_before_anything_changes(
    tmp_path: Path, emqx_tables: Any, capsys: pytest.CaptureFixture[str], insert: str, named: str
) -> None:
    conn = emqx_tables
    await run(conn, insert)

    async def state() -> list[Any]:
        tables = await run(conn, "SHOW TABLES")
        rows = [await run(conn, f"SELECT * FROM {table}") for (table,) in tables]
        return [tables, rows]

    before = await state()
    conf = tmp_path / "migrate.conf"
    conf.write_text(config_text(pools=POOL))
    assert await asyncio.to_thread(main, ["migrate-emqx44", "-c", str(conf), "--pool", "mysql.pool1"]) == 2
    err = capsys.readouterr().err
    assert named in err and "nothing was changed" in err
    assert await state() == before
