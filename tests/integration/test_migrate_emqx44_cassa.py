"""`hookbridge migrate-emqx44 --pool cassa.pool1` on a real Cassandra node: the tables of EMQX 4.4
Enterprise's Cassandra backend page (`msg` keyed (topic, msgid) newest first with ids in every form
EMQX wrote, `client` with connected / disconnected, `retain` with only the msgid), filled as EMQX
would have, migrated twice and after interruptions at each step, then served by a bridge started
from `import-emqx`'s output (embedded broker) in one order with what hookbridge stores after the
switch."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from actions.cassa.emqx44 import BACKUP, CONVERTED, migrate_cassa
from actions.cassa.functions import bucket_of
from bridge.emqx44.survey import MigrationRefused
from bridge.emqx_msgid import convert
from conformance.cassa_store import CassaStore
from support.bridges import eventually, mqtt_port
from support.emqx44_import import import_emqx, imported_bridge, migrate
from support.emqx_ids import emqttd_base62, emqx_base62, guid, to_hexstr
from support.mqtt import Client
from support.services import start_cassandra

PORT = 9042  # shared: this module keeps to its own keyspace
KS = "emqx44_migrate"

# The tables as EMQX 4.4's Cassandra backend page gives them.
EMQX44_TABLES = (
    "CREATE TABLE {ks}.client (clientid text, node text, state int, connected timestamp, disconnected timestamp,"
    " PRIMARY KEY (clientid))",
    "CREATE TABLE {ks}.sub (clientid text, topic text, qos int, PRIMARY KEY (clientid, topic))",
    "CREATE TABLE {ks}.msg (topic text, msgid text, sender text, qos int, retain int, payload blob,"
    " arrived timestamp, PRIMARY KEY (topic, msgid)) WITH CLUSTERING ORDER BY (msgid DESC)",
    "CREATE TABLE {ks}.retain (topic text, msgid text, PRIMARY KEY (topic))",
    "CREATE TABLE {ks}.acked (clientid text, topic text, msgid text, PRIMARY KEY (clientid, topic))",
)
NOW = int(time.time())


def emqx_id(seconds_ago: int, seq: int, encode: Callable[[int], str] = emqttd_base62) -> str:
    """EMQX's msgid in Cassandra, in the text `encode` gives it: 2.x base62 (the page's
    `2PguFrHsrzEvIIBdctmb`), 4.x `${msgid}` (emqx_base62 of the decimal text), 32 hex."""
    return encode(guid((NOW - seconds_ago) * 1_000_000, 0x0A0B0C0D0E0F, seq))


# One queue holding every form
EMQX_IDS = {
    "e1": emqx_id(3600, 1, emqx_base62),
    "e2": emqx_id(3599, 2),
    "e3": emqx_id(3598, 3, to_hexstr),
    "ret": emqx_id(3000, 7, emqx_base62),
}


def new(name: str) -> str:
    return convert(EMQX_IDS[name])[1]


def at(seconds_ago: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(NOW - seconds_ago, dt.UTC)


@pytest.fixture
async def cql() -> AsyncIterator[Any]:
    start_cassandra(PORT)
    store = CassaStore(PORT)
    await store.connect()
    yield store.cql
    await store.cql.execute(f"DROP KEYSPACE IF EXISTS {KS}")
    await store.close()


async def write_as_emqx44(cql: Any) -> None:
    await cql.execute(f"DROP KEYSPACE IF EXISTS {KS}")
    await cql.execute(f"CREATE KEYSPACE {KS} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}")
    for statement in EMQX44_TABLES:
        await cql.execute(statement.format(ks=KS))
    await cql.execute(
        f"INSERT INTO {KS}.client (clientid, node, state, connected, disconnected) VALUES (%s, %s, %s, %s, %s)",
        ("dev1", "emqx@127.0.0.1", 0, at(7200), at(3500)),
    )
    await cql.execute(f"INSERT INTO {KS}.sub (clientid, topic, qos) VALUES ('dev1', 'proxy/dev1', 1)")
    for name in ("e1", "e2", "e3"):
        await cql.execute(
            f"INSERT INTO {KS}.msg (topic, msgid, sender, qos, retain, payload, arrived)"
            " VALUES ('pubsub/t', %s, 'emqx-pub', 1, 0, %s, %s)",
            (EMQX_IDS[name], name.encode(), at(3600)),
        )
    # EMQX's retain row names its message, which its msg table holds (on_message_publish stored it)
    await cql.execute(
        f"INSERT INTO {KS}.msg (topic, msgid, sender, qos, retain, payload, arrived)"
        " VALUES ('status/x', %s, 'emqx-pub', 1, 1, %s, %s)",
        (EMQX_IDS["ret"], b"retained-by-emqx", at(3000)),
    )
    await cql.execute(f"INSERT INTO {KS}.retain (topic, msgid) VALUES ('status/x', %s)", (EMQX_IDS["ret"],))
    await cql.execute(f"INSERT INTO {KS}.retain (topic, msgid) VALUES ('status/gone', %s)", (emqx_id(2000, 9),))
    await cql.execute(
        f"INSERT INTO {KS}.acked (clientid, topic, msgid) VALUES ('dev1', 'pubsub/t', %s)", (EMQX_IDS["e1"],)
    )


async def snapshot(cql: Any) -> dict[str, Any]:
    """Every table of the keyspace: its comment and its rows."""
    tables = await cql.execute("SELECT table_name, comment FROM system_schema.tables WHERE keyspace_name = %s", (KS,))
    out: dict[str, Any] = {}
    for name, comment in sorted(tables):
        out[name] = (comment, sorted(repr(tuple(row)) for row in await cql.execute(f"SELECT * FROM {KS}.{name}")))
    return out


class Recording:
    """A session that counts its statements and fails at statement number `stop` (never: -1)."""

    def __init__(self, cql: Any, stop: int = -1) -> None:
        self.cql, self.stop = cql, stop
        self.statements: list[str] = []

    async def execute(self, statement: Any, args: Sequence[Any] | None = None) -> list[Any]:
        if len(self.statements) == self.stop:
            raise ConnectionError("interrupted")
        self.statements.append(str(getattr(statement, "query_string", statement)))
        return list(await self.cql.execute(statement, args))

    async def pages(self, statement: str, args: Sequence[Any] | None = None, size: int = 1000) -> AsyncIterator[Any]:
        if len(self.statements) == self.stop:
            raise ConnectionError("interrupted")
        self.statements.append(statement)
        async for rows in self.cql.pages(statement, args, size=2):  # pages of two: several per table here
            yield rows

    async def prepare(self, text: str) -> Any:
        return await self.cql.prepare(text)


async def test_migration_converts_is_idempotent_and_resumes_after_interruptions(cql: Any) -> None:
    await write_as_emqx44(cql)
    before = await snapshot(cql)
    dry = await migrate_cassa(cql, KS, dry_run=True)
    assert dry[:3] == [
        "acked: 1 emqx_base62 of the decimal text (EMQX 3.x/4.x)",
        "msg: 2 emqx_base62 of the decimal text (EMQX 3.x/4.x), 1 positional base62 (EMQ X 2.x), 1 32 hex",
        "retain: 1 emqx_base62 of the decimal text (EMQX 3.x/4.x), 1 positional base62 (EMQ X 2.x)",
    ]
    assert [line.split(":")[0] for line in dry[3:]] == ["client", "msg", "retain", "acked"]
    assert await snapshot(cql) == before  # a dry run changes nothing

    run = Recording(cql)
    lines = await migrate_cassa(run, KS)
    assert "retain: 1 retained messages whose message EMQX no longer had, dropped" in lines
    rows = await cql.execute(
        f"SELECT msgid, payload, qos, retain, bucket FROM {KS}.msg WHERE topic = 'pubsub/t' ALLOW FILTERING"
    )
    assert sorted(rows) == [(new(n), n.encode(), 1, False, bucket_of(new(n))) for n in ("e1", "e2", "e3")]
    buckets = await cql.execute(f"SELECT bucket FROM {KS}.msg_bucket WHERE topic = 'pubsub/t'")
    assert [b for (b,) in buckets] == [bucket_of(new("e1"))]
    topics = await cql.execute(f"SELECT root, topic FROM {KS}.topic")
    assert sorted(topics) == [("pubsub", "pubsub/t"), ("status", "status/x")]
    retained = await cql.execute(f"SELECT topic, msgid, sender, qos, payload FROM {KS}.retain")
    assert list(retained) == [("status/x", new("ret"), "emqx-pub", 1, b"retained-by-emqx")]
    client = await cql.execute(f"SELECT state, node, online_at, offline_at FROM {KS}.client WHERE clientid = 'dev1'")
    assert [tuple(r) for r in client] == [
        (0, "emqx@127.0.0.1", at(7200).replace(tzinfo=None), at(3500).replace(tzinfo=None))
    ]
    acked = await cql.execute(f"SELECT msgid FROM {KS}.acked WHERE clientid = 'dev1' AND topic = 'pubsub/t'")
    assert list(acked) == [(new("e1"),)]
    reference = await snapshot(cql)
    assert reference[f"msg{BACKUP}"][0] == CONVERTED and len(reference[f"msg{BACKUP}"][1]) == 4  # EMQX's kept

    assert await migrate_cassa(cql, KS) == ["acked: 1 32 hex"]  # a second run: nothing to do
    assert await snapshot(cql) == reference

    # Stopped at each step of msg's move (each changes the schema or the copy), inside its copy and
    # at the last offset, then run again: the same end state. (Every statement would be minutes of
    # DDL on one node; client and retain move through the same code.)
    def msg_step(text: str) -> bool:
        return f"{KS}.msg{BACKUP} " in text + " " or text == f"DROP TABLE {KS}.msg"

    steps = [n for n, text in enumerate(run.statements) if msg_step(text) and not text.startswith(("INSERT", "SELECT"))]
    msg_copy = next(n for n, text in enumerate(run.statements) if text.startswith(f"INSERT INTO {KS}.msg{BACKUP}"))
    steps += [msg_copy + 1, len(run.statements) - 1]
    assert len(steps) == 6, [run.statements[n] for n in steps]
    for stop in sorted(set(steps)):
        await write_as_emqx44(cql)
        with pytest.raises(ConnectionError):
            await migrate_cassa(Recording(cql, stop), KS)
        await migrate_cassa(cql, KS)
        assert await snapshot(cql) == reference, f"interrupted at {run.statements[stop]}"


IMPORT = {
    "username = cassandra": "username = hookbridge",
    "password = cassandra": "password = hookbridge",
    "keyspace = mqtt": f"keyspace = {KS}",
}


async def test_a_bridge_serves_what_emqx44_stored_in_order_with_its_own(
    tmp_path: Path, cql: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a user switches: import-emqx of EMQX's emqx_backend_cassa.conf, migrate-emqx44 with the
    config it wrote (dry run, then twice), a bridge of that config and rules."""
    await write_as_emqx44(cql)
    paths = import_emqx(tmp_path, "emqx_backend_cassa.conf", IMPORT)
    assert await migrate(paths, "cassa.pool1", "--dry-run") == 0
    for _ in range(2):
        assert await migrate(paths, "cassa.pool1") == 0
    async with imported_bridge(paths, tmp_path, monkeypatch) as bridge:
        await serve(bridge, cql)


async def serve(bridge: Any, cql: Any) -> None:
    port = mqtt_port(bridge)
    publisher = await Client(port, "hb-pub").connected()
    await publisher.publish("pubsub/t", b"h4", qos=1)  # stored by hookbridge after the switch
    await bridge.idle()

    async def client_state() -> list[Any]:
        return list(await cql.execute(f"SELECT state FROM {KS}.client WHERE clientid = 'dev1'"))

    # The returning subscriber: its proxy subscription applied on connect, then from its offset
    # (acked e1) EMQX's e2, e3 and then hookbridge's h4, in one order.
    dev1 = await Client(port, "dev1", clean=False).connected()
    await eventually(client_state, lambda rows: rows == [(1,)])
    await dev1.subscribe("pubsub/t", qos=1)
    assert [m.payload for m in await dev1.expect(3)] == [b"e2", b"e3", b"h4"]
    await publisher.publish("proxy/dev1", b"to-proxy", qos=1)
    assert [m.payload for m in await dev1.expect(1)] == [b"to-proxy"]

    async def offset() -> list[Any]:
        return list(await cql.execute(f"SELECT msgid FROM {KS}.acked WHERE clientid = 'dev1' AND topic = 'pubsub/t'"))

    acked = await eventually(offset, lambda rows: rows[0][0] > new("e3"))  # moved past EMQX's, to h4
    assert len(acked[0][0]) == 32

    # A new subscriber gets the retained message EMQX stored.
    fresh = await Client(port, "fresh").connected()
    await fresh.subscribe("status/#", qos=1)
    got = await fresh.expect(1)
    assert got[0].payload == b"retained-by-emqx" and got[0].retain
    for each in (dev1, fresh, publisher):
        await each.disconnect()


@pytest.mark.parametrize(
    ("statement", "named"),
    [
        (
            f"INSERT INTO {KS}.msg (topic, msgid, payload) VALUES ('pubsub/t', 'not-an-id', 0x00)",
            "msg topic 'pubsub/t' msgid: 'not-an-id'",
        ),
        (
            f"INSERT INTO {KS}.retain (topic, msgid) VALUES ('status/bad', 'Z#')",
            "retain topic 'status/bad' msgid: 'Z#'",
        ),
        (
            f"INSERT INTO {KS}.acked (clientid, topic, msgid) VALUES ('dev9', 'pubsub/t', '{'M' * 30}')",
            "acked clientid 'dev9' topic 'pubsub/t' msgid",
        ),
    ],
)
async def test_a_msgid_that_is_no_id_stops_it_before_anything_changes(cql: Any, statement: str, named: str) -> None:
    await write_as_emqx44(cql)
    await cql.execute(statement)
    before = await snapshot(cql)
    with pytest.raises(MigrationRefused) as refused:
        await migrate_cassa(cql, KS)
    assert named in str(refused.value)
    assert await snapshot(cql) == before
