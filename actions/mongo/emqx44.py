"""Bring the MongoDB collections EMQX 4.4 Enterprise wrote into hookbridge's layout (`hookbridge
migrate-emqx44 --pool mongo.<pool>`, through `MongoBackend.emqx44_migration`).

Same collection names (docs/migrate-from-emqx44.md#mongodb); what differs is in the documents.
EMQX's `mqtt_msg` documents are keyed by a counter (`_id: 1, 2, ...`) and carry the message id
as the base64 text of the 16-byte `emqx_guid` (`AAVEwm0la4RufgAABeIAAQ==`); hookbridge keys them
by the id in 32 hex digits, with `seq` (its microsecond time) for the fetch order. The offset
of a pubsub subscription, `mqtt_acked.mongo_id`, is the counter of the last acked message; ours
is its id. Payloads are text (ours: the bytes), times are numbers (ours: dates).

A document's `_id` cannot change, so each message is copied to its new `_id` and the old document
deleted: both steps can be repeated (the copy collides with itself, the delete finds nothing), so
a run stopped anywhere is finished by the next one, and a second run finds nothing to do. The
offsets are converted first, while the messages they name still have EMQX's `_id`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bson.binary import Binary
from pymongo.errors import BulkWriteError, CollectionInvalid, DuplicateKeyError

from actions.mongo import schema
from actions.mongo.documents import seq_of, when
from bridge.emqx44.survey import IdSurvey, check_kept
from bridge.emqx_msgid import UnconvertibleId, convert

# Numbers above this are milliseconds, below it seconds (EMQX's pages show seconds, its 4.x code
# wrote milliseconds): 1e11 seconds is the year 5138, 1e11 milliseconds 1973.
_MILLIS_FROM = 100_000_000_000
_PAGE = 500  # messages moved by one insert_many and one delete_many


def mongo_hookbridge_id(emqx_id: Any) -> str | None:
    """hookbridge's id for the msgid EMQX 4.4 wrote to MongoDB; None if it is one already or no id."""
    new = _new_id(emqx_id)
    return None if new == emqx_id else new


def _new_id(emqx_id: Any) -> str | None:
    """The id a message will have in hookbridge's layout (also when it has it already); None: no
    id (the survey refused the migration before it got here)."""
    if not isinstance(emqx_id, str):
        return None
    try:
        return convert(emqx_id)[1]
    except UnconvertibleId:
        return None


async def _survey(db: Any, survey: IdSurvey) -> tuple[int, int]:
    """Every msgid of EMQX's messages and retained messages read (nothing changed); returns how many
    messages there are (a msgid stored twice is one) and how many retained topics."""
    messages: set[Any] = set()
    survey.note("mqtt_msg")
    async for doc in db.mqtt_msg.find({}, {"msgid": 1, "topic": 1, "seq": 1}):
        if "seq" in doc:  # hookbridge's
            messages.add(doc["_id"])
            continue
        where = f"_id {doc['_id']!r} msgid"
        new = survey.convert("mqtt_msg", where, doc.get("msgid"))
        if not isinstance(doc.get("topic"), str):
            survey.unconvertible.append(f"mqtt_msg _id {doc['_id']!r}: topic {doc.get('topic')!r} (not text)")
        messages.add(new)
    survey.note("mqtt_retain")
    retained = set()
    async for doc in db.mqtt_retain.find({}, {"msgid": 1, "topic": 1}):
        survey.convert("mqtt_retain", f"topic {doc.get('topic')!r} msgid", doc.get("msgid"))
        retained.add(repr(doc.get("topic")))
    return len(messages), len(retained)


def as_date(value: Any) -> dt.datetime | None:
    """EMQX's number of seconds (or milliseconds) as a BSON date; dates and None as they are."""
    if isinstance(value, dt.datetime) or value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return when(value / 1000 if value >= _MILLIS_FROM else value)


def as_payload(value: Any) -> Any:
    """EMQX's text payload as the bytes hookbridge delivers; parsed JSON (EMQX's `mongo_json`) and
    bytes stay as they are (a fetch delivers a document as compact JSON)."""
    if isinstance(value, str):
        return Binary(value.encode())
    return b"" if value is None else value


@dataclass
class Counts:
    messages: int = 0  # given hookbridge's _id
    duplicates: int = 0  # a second document with the same msgid (hookbridge keeps one per msgid)
    retained: int = 0
    offsets: int = 0
    clients: int = 0
    second_keys: int = 0  # documents a unique index of hookbridge's would refuse (a second of one key)
    unknown: list[str] = field(default_factory=list)
    survey: IdSurvey = field(default_factory=IdSurvey)

    def lines(self, dry_run: bool) -> list[str]:
        if not (self.messages or self.retained or self.offsets or self.clients or self.second_keys or self.unknown):
            return []
        verb = "would convert" if dry_run else "converted"
        out = [
            *self.survey.lines(),
            f"{verb} {self.messages} stored messages, {self.retained} retained messages, {self.offsets} pubsub"
            f" offsets, {self.clients} client states; {self.duplicates} second copies of one msgid"
            f" {'would be ' if dry_run else ''}dropped",
        ]
        if self.second_keys:
            out.append(
                f"{self.second_keys} documents repeating the key of another (client, subscription, retained"
                f" topic or offset) {'would be ' if dry_run else ''}dropped, for hookbridge's unique indexes"
            )
        out += [f"left as is (not an EMQX 4.4 or hookbridge id): {item}" for item in self.unknown[:20]]
        return out


async def _offsets(db: Any, counts: Counts, dry_run: bool) -> None:
    """`mongo_id` (EMQX's counter of the last acked message) -> `msgid` / `mid` (its id and seq)."""
    async for doc in db.mqtt_acked.find({"msgid": {"$exists": False}}):
        target = None
        if doc.get("mongo_id") is not None:
            target = await db.mqtt_msg.find_one({"_id": doc["mongo_id"]}, {"msgid": 1})
        # A message that is gone leaves the offset at the start: messages may come again, never go missing.
        msgid = (_new_id(target.get("msgid")) if target else None) or ""
        counts.offsets += 1
        if not dry_run:
            await db.mqtt_acked.update_one(
                {"_id": doc["_id"], "msgid": {"$exists": False}},
                {"$set": {"msgid": msgid, "mid": seq_of(msgid)}, "$unset": {"mongo_id": ""}},
            )


def _message(new: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    arrived = as_date(doc.get("arrived")) or when(int(new[:16], 16) / 1_000_000)
    return {
        "_id": new,
        "msgid": new,
        "seq": seq_of(new),
        "sender": doc.get("sender") or "",
        "topic": doc["topic"],
        "qos": int(doc.get("qos") or 0),
        "retain": bool(doc.get("retain")),
        "payload": as_payload(doc.get("payload")),
        "arrived": arrived,
    }


async def _messages(db: Any, counts: Counts, dry_run: bool) -> None:
    """Every document without `seq` (EMQX's) copied to its hookbridge `_id`, then deleted; a page
    of them at a time (one insert_many, one delete_many)."""
    page: list[tuple[dict[str, Any], dict[str, Any]]] = []
    async for doc in db.mqtt_msg.find({"seq": {"$exists": False}}):
        new = _new_id(doc.get("msgid"))
        if new is None or not isinstance(doc.get("topic"), str):
            counts.unknown.append(f"mqtt_msg {doc['_id']!r} msgid {doc.get('msgid')!r}")
            continue
        counts.messages += 1
        if dry_run:
            continue
        if doc["_id"] == new:  # keyed by its id already: only the fields change
            await db.mqtt_msg.replace_one({"_id": new}, _message(new, doc))
            continue
        page.append((doc, _message(new, doc)))
        if len(page) >= _PAGE:
            await _move_page(db, page, counts)
            page = []
    if page:
        await _move_page(db, page, counts)


async def _move_page(db: Any, page: list[tuple[dict[str, Any], dict[str, Any]]], counts: Counts) -> None:
    try:
        await db.mqtt_msg.insert_many([new for _, new in page], ordered=False)
    except (BulkWriteError, KeyError):
        # Some were there already (copied by an interrupted run, or a second document of one msgid);
        # FerretDB's reply to a partly failed bulk lacks a count PyMongo reads (KeyError). One by one:
        for old, new in page:
            try:
                await db.mqtt_msg.insert_one(new)
            except DuplicateKeyError:
                existing = await db.mqtt_msg.find_one({"_id": new["_id"]}, {"topic": 1})
                if existing is None or existing.get("topic") != old["topic"]:
                    counts.messages -= 1
                    counts.duplicates += 1
    await db.mqtt_msg.delete_many({"_id": {"$in": [old["_id"] for old, _ in page]}})


async def _retained(db: Any, counts: Counts, dry_run: bool) -> None:
    async for doc in db.mqtt_retain.find({}):
        new = _new_id(doc.get("msgid"))
        changes: dict[str, Any] = {}
        if new is None:
            counts.unknown.append(f"mqtt_retain {doc.get('topic')!r} msgid {doc.get('msgid')!r}")
        elif new != doc.get("msgid"):
            changes["msgid"] = new
        if not isinstance(doc.get("payload"), bytes | dict | list):
            changes["payload"] = as_payload(doc.get("payload"))
        if not isinstance(doc.get("arrived"), dt.datetime) and (arrived := as_date(doc.get("arrived"))):
            changes["arrived"] = arrived
        if not isinstance(doc.get("qos"), int):
            changes["qos"] = int(doc.get("qos") or 0)
        if not changes:
            continue
        counts.retained += 1
        if not dry_run:
            await db.mqtt_retain.update_one({"_id": doc["_id"]}, {"$set": changes})


async def _clients(db: Any, counts: Counts, dry_run: bool) -> None:
    """Times as dates, and `event_at` (the newest event wins) from the newest of them."""
    async for doc in db.mqtt_client.find({"event_at": {"$exists": False}}):
        online, offline = as_date(doc.get("online_at")), as_date(doc.get("offline_at"))
        event_at = max((t for t in (online, offline) if t is not None), default=None) or dt.datetime.now(dt.UTC)
        counts.clients += 1
        if dry_run:
            continue
        fields = {
            "state": int(doc.get("state") or 0),
            "online_at": online,
            "offline_at": offline,
            "event_at": event_at,
            "created": as_date(doc.get("created")) or event_at,
        }
        await db.mqtt_client.update_one({"_id": doc["_id"], "event_at": {"$exists": False}}, {"$set": fields})


# Which document of several with one key is kept: the first by `_id`, of retained messages the newest.
_KEEP_FIRST: dict[str, list[tuple[str, int]]] = {"mqtt_retain": [("msgid", -1)]}


async def _second_keys(db: Any, counts: Counts, dry_run: bool) -> None:
    """EMQX's collections had no unique index (and applications write mqtt_sub): hookbridge's would
    be refused while two documents share a key, so all but one of them go."""
    for index in schema.INDEXES:
        if not index.options.get("unique"):
            continue
        fields = [name for name, _ in index.keys]
        seen: set[tuple[str, ...]] = set()
        order = _KEEP_FIRST.get(index.collection, [("_id", 1)])
        async for doc in db[index.collection].find({}, dict.fromkeys(fields, 1)).sort(order):
            key = tuple(repr(doc.get(name)) for name in fields)
            if key not in seen:
                seen.add(key)
                continue
            counts.second_keys += 1
            if not dry_run:
                await db[index.collection].delete_one({"_id": doc["_id"]})


async def _schema(db: Any) -> None:
    """hookbridge's collections and indexes. EMQX's index on mqtt_retain's topic is not unique and
    has another name: an index of the same keys would be refused, so it goes first."""
    existing = set(await db.list_collection_names())
    for name in schema.COLLECTIONS:
        if name not in existing:
            with contextlib.suppress(CollectionInvalid):
                await db.create_collection(name)
    for index in schema.INDEXES:
        collection = db[index.collection]
        for name, info in (await collection.index_information()).items():
            same_keys = [tuple(key) for key in info["key"]] == [tuple(key) for key in index.keys]
            if same_keys and name != index.name and name != "_id_":
                await collection.drop_index(name)
        await collection.create_index(list(index.keys), name=index.name, **index.options)
    for topic in await db.mqtt_msg.distinct("topic"):
        with contextlib.suppress(DuplicateKeyError):
            await db.mqtt_topic.insert_one({"_id": topic})


async def migrate_mongo(db: Any, dry_run: bool = False) -> Counts:
    counts = Counts()
    messages, retained = await _survey(db, counts.survey)
    counts.survey.refuse_unconvertible()  # before the first change
    await _offsets(db, counts, dry_run)  # first: they name messages by EMQX's _id
    await _messages(db, counts, dry_run)
    await _retained(db, counts, dry_run)
    await _clients(db, counts, dry_run)
    await _second_keys(db, counts, dry_run)
    if not dry_run:
        check_kept("mqtt_msg", messages, await db.mqtt_msg.count_documents({}))
        check_kept("mqtt_retain", retained, await db.mqtt_retain.count_documents({}))
        await _schema(db)
    return counts


async def migrate(pool: Any, dry_run: bool) -> list[str]:
    """`hookbridge migrate-emqx44 --pool mongo.<pool>`: a client of the pool's own settings. The
    bridge adds the expiry index when it starts (or `hookbridge schema --apply`)."""
    from pymongo import AsyncMongoClient

    from actions.mongo.client_settings import client_options

    client: Any = AsyncMongoClient(**client_options(pool))
    try:
        return (await migrate_mongo(client[pool["database"]], dry_run=dry_run)).lines(dry_run)
    finally:
        await client.close()
