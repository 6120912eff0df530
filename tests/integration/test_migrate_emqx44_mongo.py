"""`hookbridge migrate-emqx44 --pool mongo.pool1` on FerretDB: the collections of EMQX 4.4 Enterprise's
MongoDB backend page (counter `_id`s, base64 msgids, `mongo_id` offsets, text payloads, times as
numbers; ids in every form EMQX wrote), filled as EMQX would have, migrated twice and after
interruptions, then served by a bridge started from `import-emqx`'s output (embedded broker) in one
order with what hookbridge stores after the switch."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId
from pymongo import AsyncMongoClient
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase

from actions.mongo.emqx44 import migrate_mongo, mongo_hookbridge_id
from bridge.emqx44.survey import MigrationRefused
from bridge.emqx_msgid import convert
from support.bridges import eventually, mqtt_port
from support.emqx44_import import import_emqx, imported_bridge, migrate
from support.emqx_ids import emqttd_base62, emqx_base62, guid, mongo_base64, to_hexstr
from support.mqtt import Client
from support.services import start_ferretdb

PORT = 27018  # shared: this module keeps to its own database
DATABASE = "emqx44_migrate"

Db = AsyncDatabase[dict[str, Any]]
NOW = int(time.time())


def emqx_guid(seconds_ago: int, seq: int, encode: Callable[[int], str] = mongo_base64) -> str:
    """EMQX's msgid (64-bit µs time, 48 bits node, 16-bit sequence) in the text `encode` gives it:
    the page's base64 (`AAVEwm0la4RufgAABeIAAQ==`) by default; the 4.x `${msgid}` (emqx_base62 of
    the decimal text), 2.x base62 and 32 hex in one queue too."""
    return encode(guid((NOW - seconds_ago) * 1_000_000, 0x0A0B0C0D0E0F, seq))


EMQX_IDS = {
    "e1": emqx_guid(3600, 1, emqx_base62),
    "e2": emqx_guid(3599, 2),
    "e3": emqx_guid(3598, 3, to_hexstr),
    "ret": emqx_guid(3000, 7, emqttd_base62),
}


async def write_as_emqx44(db: Db) -> None:
    """The documents and indexes EMQX 4.4's MongoDB backend leaves (its page's `ensureIndex` lines)."""
    await db.client.drop_database(DATABASE)
    await db.mqtt_client.create_index([("clientid", 1), ("node", 1)])
    await db.mqtt_sub.create_index([("clientid", 1)])
    await db.mqtt_msg.create_index([("sender", 1), ("topic", 1)])
    await db.mqtt_retain.create_index([("topic", 1)])  # not unique, and named topic_1
    await db.mqtt_client.insert_one(
        {
            "clientid": "dev1",
            "state": 0,
            "node": "emqx@127.0.0.1",
            "online_at": (NOW - 7200) * 1000,  # EMQX 4.x wrote milliseconds
            "offline_at": (NOW - 3500) * 1000,
        }
    )
    await db.mqtt_sub.insert_one({"clientid": "dev1", "topic": "proxy/dev1", "qos": 1})
    await db.mqtt_sub.insert_one({"clientid": "dev1", "topic": "proxy/dev1", "qos": 1})  # an application wrote it twice
    for counter, name in enumerate(("e1", "e2", "e3"), start=1):
        await db.mqtt_msg.insert_one(
            {
                "_id": counter,
                "topic": "pubsub/t",
                "msgid": EMQX_IDS[name],
                "sender": "emqx-pub",
                "qos": 1,
                "retain": False,
                # e3 as EMQX's payload_format = mongo_json kept a JSON payload: a document
                "payload": {"n": 3} if name == "e3" else name,
                "arrived": NOW - 3600,  # the page's seconds
            }
        )
    # The same msgid on a second topic: hookbridge keys messages by msgid, so this second one goes
    await db.mqtt_msg.insert_one(
        {"_id": 4, "topic": "pubsub/other", "msgid": EMQX_IDS["e2"], "sender": "emqx-pub", "qos": 1, "payload": "x"}
    )
    await db.mqtt_acked.insert_one({"clientid": "dev1", "topic": "pubsub/t", "mongo_id": 1})  # acked e1
    await db.mqtt_acked.insert_one({"clientid": "dev2", "topic": "pubsub/t", "mongo_id": 99})  # a message gone
    await db.mqtt_retain.insert_one(
        {
            "topic": "status/x",
            "msgid": EMQX_IDS["ret"],
            "sender": "emqx-pub",
            "qos": 1,
            "payload": "retained-by-emqx",
            "arrived": NOW - 3000,
        }
    )


async def snapshot(db: Db) -> dict[str, list[str]]:
    """Every document of every collection (generated ObjectIds left out: they differ per write)."""
    out: dict[str, list[str]] = {}
    for name in sorted(await db.list_collection_names()):
        docs = [
            repr(sorted((k, v) for k, v in doc.items() if not isinstance(v, ObjectId)))
            async for doc in db[name].find({})
        ]
        out[name] = sorted(docs)
    return out


class Interrupting:
    """A database (or collection) whose calls fail after `budget` of them: the migration stopped midway."""

    def __init__(self, target: Any, budget: list[int]) -> None:
        self._target, self._budget = target, budget

    def __getitem__(self, name: str) -> Interrupting:
        return Interrupting(self._target[name], self._budget)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._target, name)
        if isinstance(target, AsyncCollection):
            return Interrupting(target, self._budget)
        if name == "find" or not callable(target):
            return target  # a cursor: its reads are not what a stop interrupts

        async def call(*args: Any, **kwargs: Any) -> Any:
            self._budget[0] -= 1
            if self._budget[0] < 0:
                raise ConnectionError("interrupted")
            return await target(*args, **kwargs)

        return call


@pytest.fixture
async def mongo() -> AsyncIterator[Db]:
    start_ferretdb(PORT)
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        f"mongodb://127.0.0.1:{PORT}/?directConnection=true", tz_aware=True
    )
    yield client[DATABASE]
    await client.drop_database(DATABASE)
    await client.close()


def new(name: str) -> str:
    return convert(EMQX_IDS[name])[1]


async def test_migration_converts_is_idempotent_and_resumes_after_any_interruption(mongo: Db) -> None:
    await write_as_emqx44(mongo)
    before = await snapshot(mongo)
    dry = await migrate_mongo(mongo, dry_run=True)
    assert (dry.messages, dry.retained, dry.offsets, dry.clients, dry.second_keys) == (4, 1, 2, 1, 1)
    assert dry.survey.lines() == [
        "mqtt_msg: 1 emqx_base62 of the decimal text (EMQX 3.x/4.x), 2 base64 of the 16 bytes (MongoDB), 1 32 hex",
        "mqtt_retain: 1 positional base62 (EMQ X 2.x)",
    ]
    assert await snapshot(mongo) == before  # a dry run changes nothing

    counts = await migrate_mongo(mongo)
    assert (counts.messages, counts.duplicates, counts.retained, counts.offsets) == (3, 1, 1, 2)
    assert (counts.clients, counts.unknown) == (1, [])
    messages = [doc async for doc in mongo.mqtt_msg.find({}).sort("_id", 1)]
    assert [doc["_id"] for doc in messages] == [new("e1"), new("e2"), new("e3")]
    assert [doc["payload"] for doc in messages] == [b"e1", b"e2", {"n": 3}]
    assert all(doc["msgid"] == doc["_id"] and doc["seq"] == int(doc["_id"][:16], 16) for doc in messages)
    assert messages[0]["arrived"].timestamp() == NOW - 3600
    offset = await mongo.mqtt_acked.find_one({"clientid": "dev1"})
    assert offset is not None and offset["msgid"] == new("e1") and "mongo_id" not in offset
    gone = await mongo.mqtt_acked.find_one({"clientid": "dev2"})  # at the start: again, never missing
    assert gone is not None and (gone["msgid"], gone["mid"]) == ("", 0)
    retained = await mongo.mqtt_retain.find_one({"topic": "status/x"})
    assert retained is not None and retained["msgid"] == new("ret") and retained["payload"] == b"retained-by-emqx"
    client = await mongo.mqtt_client.find_one({"clientid": "dev1"})
    assert client is not None and client["offline_at"].timestamp() == NOW - 3500
    assert client["event_at"] == client["offline_at"]
    assert [doc["_id"] async for doc in mongo.mqtt_topic.find({})] == ["pubsub/t"]
    assert await mongo.mqtt_sub.count_documents({}) == 1
    assert (await mongo.mqtt_sub.index_information())["clientid_topic"]["unique"]
    retain_indexes = await mongo.mqtt_retain.index_information()
    assert retain_indexes["topic"]["unique"] and "topic_1" not in retain_indexes

    reference = await snapshot(mongo)
    again = await migrate_mongo(mongo)
    assert again.lines(False) == []
    assert await snapshot(mongo) == reference

    # Stopped after any number of calls, then run again: the same end state.
    budget = 0
    while True:
        await write_as_emqx44(mongo)
        try:
            await migrate_mongo(Interrupting(mongo, [budget]))
        except ConnectionError:
            await migrate_mongo(mongo)
            assert await snapshot(mongo) == reference, f"interrupted after {budget} calls"
            budget += 1
            continue
        break
    assert budget > 10


IMPORT = {"server = 127.0.0.1:27017": f"server = 127.0.0.1:{PORT}", "database = mqtt": f"database = {DATABASE}"}


async def test_a_bridge_serves_what_emqx44_stored_in_order_with_its_own(
    tmp_path: Path, mongo: Db, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a user switches: import-emqx of EMQX's emqx_backend_mongo.conf, migrate-emqx44 with the
    config it wrote (dry run, then twice), a bridge of that config and rules."""
    await write_as_emqx44(mongo)
    paths = import_emqx(tmp_path, "emqx_backend_mongo.conf", IMPORT)
    assert await migrate(paths, "mongo.pool1", "--dry-run") == 0
    for _ in range(2):
        assert await migrate(paths, "mongo.pool1") == 0
    async with imported_bridge(paths, tmp_path, monkeypatch) as bridge:
        await serve(bridge, mongo)


async def serve(bridge: Any, mongo: Db) -> None:
    port = mqtt_port(bridge)
    publisher = await Client(port, "hb-pub").connected()
    await publisher.publish("pubsub/t", b"h4", qos=1)  # stored by hookbridge after the switch
    await bridge.idle()
    ours = await mongo.mqtt_msg.find_one({"payload": b"h4"})
    assert ours is not None and ours["_id"] > new("e3")

    # The returning subscriber: its proxy subscription applied on connect, then from its offset
    # (acked e1) EMQX's e2, e3 (a mongo_json document, delivered as JSON) and then hookbridge's h4.
    dev1 = await Client(port, "dev1", clean=False).connected()
    await eventually(lambda: mongo.mqtt_client.find_one({"clientid": "dev1"}), lambda doc: doc["state"] == 1)
    await dev1.subscribe("pubsub/t", qos=1)
    assert [m.payload for m in await dev1.expect(3)] == [b"e2", b'{"n":3}', b"h4"]
    await publisher.publish("proxy/dev1", b"to-proxy", qos=1)
    assert [m.payload for m in await dev1.expect(1)] == [b"to-proxy"]
    offset = await eventually(
        lambda: mongo.mqtt_acked.find_one({"clientid": "dev1", "topic": "pubsub/t"}),
        lambda doc: doc["msgid"] == ours["_id"],
    )
    assert offset["mid"] == ours["seq"]

    # A new subscriber gets the retained message EMQX stored.
    fresh = await Client(port, "fresh").connected()
    await fresh.subscribe("status/#", qos=1)
    got = await fresh.expect(1)
    assert got[0].payload == b"retained-by-emqx" and got[0].retain
    for each in (dev1, fresh, publisher):
        await each.disconnect()


def test_the_page_example_msgid_is_its_guid_in_hex() -> None:
    # EMQX's MongoDB page: msgid "AAVEwm0la4RufgAABeIAAQ==", arrived 1482976729
    converted = mongo_hookbridge_id("AAVEwm0la4RufgAABeIAAQ==")
    assert converted == "000544C26D256B846E7E000005E20001"
    assert int(converted[:16], 16) // 1_000_000 == 1482976729


@pytest.mark.parametrize(
    ("collection", "document", "named"),
    [
        (
            "mqtt_msg",
            {"_id": 9, "topic": "pubsub/t", "msgid": "no id", "payload": "x"},
            "mqtt_msg _id 9 msgid: 'no id'",
        ),
        ("mqtt_msg", {"_id": 9, "topic": "pubsub/t", "payload": "x"}, "mqtt_msg _id 9 msgid: None"),
        ("mqtt_retain", {"topic": "status/bad", "msgid": "Z" * 60}, "mqtt_retain topic 'status/bad' msgid"),
    ],
)
async def test_a_msgid_that_is_no_id_stops_it_before_anything_changes(
    mongo: Db, collection: str, document: dict[str, Any], named: str
) -> None:
    await write_as_emqx44(mongo)
    await mongo[collection].insert_one(document)
    before = await snapshot(mongo)
    with pytest.raises(MigrationRefused, match=named.replace("(", r"\(")):
        await migrate_mongo(mongo)
    assert await snapshot(mongo) == before
