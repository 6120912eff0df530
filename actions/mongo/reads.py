"""The store queries of the read-then-act functions on MongoDB (the protocol: bridge/fetch.py).

A wildcard filter finds its topics in `mqtt_topic` / `mqtt_retain` by a range on
the filter's literal prefix (exact MQTT matching on the few candidates); messages
are then read through the (topic, seq, _id) index, oldest first, all matching
topics in one query sorted on (seq, _id), which is msgid order (publish order).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pymongo import ASCENDING, DESCENDING
from pymongo.errors import DuplicateKeyError

from actions.mongo.documents import payload_bytes, seq_of, when
from bridge.fetch import NO_UPPER, Stored, Window
from bridge.topics import matching, prefix_range

Database = Any  # pymongo AsyncDatabase

ORDER = [("seq", ASCENDING), ("_id", ASCENDING)]
_NEWEST = [("seq", DESCENDING), ("_id", DESCENDING)]
_FIELDS = {"sender": 1, "topic": 1, "qos": 1, "payload": 1, "payload_raw": 1}


def _candidates(collection: Any, field: str) -> Callable[[str], Awaitable[list[str]]]:
    """The topics in `collection` under a filter's literal prefix."""

    async def under_prefix(topic_filter: str) -> list[str]:
        bounds = prefix_range(topic_filter)
        query: dict[str, Any] = {}
        if bounds is not None:
            query[field] = {"$gte": bounds[0], **({"$lt": bounds[1]} if bounds[1] is not None else {})}
        return [doc[field] async for doc in collection.find(query, {field: 1})]

    return under_prefix


def _stored(doc: dict[str, Any]) -> Stored:
    payload = doc.get("payload_raw")
    return Stored(
        doc.get("msgid") or doc["_id"],
        doc["topic"],
        payload if isinstance(payload, bytes) else payload_bytes(doc["payload"]),
        doc["qos"],
        doc["sender"],
    )


def _range(after: str, upper: str) -> dict[str, Any]:
    # seq narrows the index range; _id (the msgid) is the exact bound.
    seq = {"$gte": seq_of(after)} if after else {}
    if upper != NO_UPPER:
        seq["$lte"] = seq_of(upper)
    return {**({"seq": seq} if seq else {}), "_id": {"$gt": after, "$lt": upper}}


class MongoStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def subscriptions(self, clientid: str) -> list[tuple[str, Any]]:
        cursor = self.db.mqtt_sub.find({"clientid": clientid}, {"topic": 1, "qos": 1}).sort("topic", ASCENDING)
        return [(doc["topic"], doc["qos"]) async for doc in cursor]

    async def retained_topics(self, topic_filter: str) -> list[str]:
        return await matching(topic_filter, _candidates(self.db.mqtt_retain, "topic"))

    async def retained(self, topic_filter: str, topics: Sequence[str]) -> list[Stored]:
        query: dict[str, Any] = {"topic": {"$in": list(topics)}}
        query["$or"] = [{"expires_at": None}, {"expires_at": {"$gt": dt.datetime.now(dt.UTC)}}]  # not expired
        cursor = self.db.mqtt_retain.find(query, {"msgid": 1, **_FIELDS}).sort("topic", ASCENDING)
        return [_stored(doc) async for doc in cursor]

    async def message_topics(self, topic_filter: str) -> list[str]:
        return await matching(topic_filter, _candidates(self.db.mqtt_topic, "_id"))

    async def page(self, topics: Sequence[str], window: Window, limit: int) -> list[Stored]:
        query: dict[str, Any] = {"topic": {"$in": list(topics)}, **_range(window.after, window.upper)}
        if window.since is not None:
            query["arrived"] = {"$gte": when(window.since)}
        # Expired but not yet removed (TTL monitor or periodic delete): not sent.
        query["$or"] = [{"expires_at": None}, {"expires_at": {"$gt": dt.datetime.now(dt.UTC)}}]
        cursor = self.db.mqtt_msg.find(query, {"msgid": 1, **_FIELDS}).sort(ORDER).limit(limit)
        return [_stored(doc) async for doc in cursor]

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        found = await self.db.mqtt_acked.find_one({"clientid": clientid, "topic": topic_filter}, {"msgid": 1})
        return None if found is None else str(found["msgid"])

    async def start_offset(self, clientid: str, topic_filter: str, topics: Sequence[str], before: str | None) -> None:
        everything = {"topic": {"$in": list(topics)}, **_range("", before or NO_UPPER)}
        newest = await self.db.mqtt_msg.find_one(everything, {"_id": 1}, sort=_NEWEST)
        msgid = newest["_id"] if newest else ""
        with contextlib.suppress(DuplicateKeyError):  # a replayed fetch: the offset is there already
            await self.db.mqtt_acked.insert_one(
                {"clientid": clientid, "topic": topic_filter, "msgid": msgid, "mid": seq_of(msgid)}
            )
