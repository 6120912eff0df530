"""Read-then-act functions on MongoDB: proxy subscription, retain lookup, offline fetch.

A wildcard filter finds its topics in `mqtt_topic` / `mqtt_retain` by a range on
the filter's literal prefix (exact MQTT matching on the few candidates); messages
are then read through the (topic, seq, _id) index, oldest first, all matching
topics in one query sorted on (seq, _id), which is msgid order (publish order).
The fetch cursor is the last msgid considered.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pymongo import ASCENDING, DESCENDING
from pymongo.errors import DuplicateKeyError

from actions.mongo.documents import payload_bytes, seq_of, when
from bridge.backend import FunctionContext, Job
from bridge.brokers.base import Delivery
from bridge.events import ClientConnected, SessionSubscribed
from bridge.topics import is_wildcard, matches, prefix_range

Database = Any  # pymongo AsyncDatabase
Reader = Callable[[Database, FunctionContext, Job], Awaitable[None]]

ORDER = [("seq", ASCENDING), ("_id", ASCENDING)]
_NEWEST = [("seq", DESCENDING), ("_id", DESCENDING)]
_NO_UPPER = "G"  # sorts after every upper-case hex id: no live_from bound
_FIELDS = {"sender": 1, "topic": 1, "qos": 1, "payload": 1, "payload_raw": 1}


async def matching_topics(collection: Any, field: str, topic_filter: str) -> list[str]:
    if not is_wildcard(topic_filter):
        return [topic_filter]
    bounds = prefix_range(topic_filter)
    query: dict[str, Any] = {}
    if bounds is not None:
        query[field] = {"$gte": bounds[0], **({"$lt": bounds[1]} if bounds[1] is not None else {})}
    found = [doc[field] async for doc in collection.find(query, {field: 1})]
    return sorted(topic for topic in found if matches(topic_filter, topic))


def _delivery(doc: dict[str, Any], event: SessionSubscribed, retain: bool) -> Delivery:
    payload = doc.get("payload_raw")
    return Delivery(
        doc.get("msgid") or doc["_id"],
        doc["topic"],
        payload if isinstance(payload, bytes) else payload_bytes(doc["payload"]),
        min(doc["qos"], event.qos),
        retain,
        doc["sender"],
        event.topic,
    )


async def subscribe_lookup(db: Database, ctx: FunctionContext, job: Job) -> None:
    event = job.event
    assert isinstance(event, ClientConnected)
    cursor = db.mqtt_sub.find({"clientid": event.clientid}, {"topic": 1, "qos": 1}).sort("topic", ASCENDING)
    await ctx.proxy_subscribe(event.clientid, [(doc["topic"], doc["qos"]) async for doc in cursor])


async def retain_lookup(db: Database, ctx: FunctionContext, job: Job) -> None:
    event = job.event
    assert isinstance(event, SessionSubscribed)  # a new subscription (registry `applies`)
    if ctx.publishes_committed is not None:
        await ctx.publishes_committed(job.seq)
    topics = [t for t in await matching_topics(db.mqtt_retain, "topic", event.topic) if t not in event.retained_sent]
    cursor = db.mqtt_retain.find({"topic": {"$in": topics}}, {"msgid": 1, **_FIELDS}).sort("topic", ASCENDING)
    await ctx.deliver(event, [_delivery(doc, event, retain=True) async for doc in cursor])


def _window(after: str, upper: str) -> dict[str, Any]:
    # seq narrows the index range; _id (the msgid) is the exact bound.
    seq = {"$gte": seq_of(after)} if after else {}
    if upper != _NO_UPPER:
        seq["$lte"] = seq_of(upper)
    return {**({"seq": seq} if seq else {}), "_id": {"$gt": after, "$lt": upper}}


async def _fetch(db: Database, ctx: FunctionContext, job: Job, pubsub: bool) -> None:
    event = job.event
    assert isinstance(event, SessionSubscribed)
    # A new persistent QoS>0 subscription (registry `applies`), or the next page (cursor).
    if job.cursor is None and ctx.publishes_committed is not None:
        await ctx.publishes_committed(job.seq)
    topics = await matching_topics(db.mqtt_topic, "_id", event.topic)
    upper = event.live_from_msgid or _NO_UPPER
    after = job.cursor or ""
    if pubsub and job.cursor is None:
        offset = await db.mqtt_acked.find_one({"clientid": event.clientid, "topic": event.topic}, {"msgid": 1})
        if offset is None:
            # First subscription: start after the newest stored message, deliver nothing.
            everything = {"topic": {"$in": topics}, **_window("", upper)}
            newest = await db.mqtt_msg.find_one(everything, {"_id": 1}, sort=_NEWEST)
            msgid = newest["_id"] if newest else ""
            with contextlib.suppress(DuplicateKeyError):  # a replayed fetch: the offset is there already
                await db.mqtt_acked.insert_one(
                    {"clientid": event.clientid, "topic": event.topic, "msgid": msgid, "mid": seq_of(msgid)}
                )
            return
        after = offset["msgid"]
    opts = job.rule.offline_opts
    query: dict[str, Any] = {"topic": {"$in": topics}, **_window(after, upper)}
    if opts.time_range:
        query["arrived"] = {"$gte": when(time.time() - opts.time_range)}
    # Expired but not yet removed (TTL monitor or periodic delete): not sent.
    query["$or"] = [{"expires_at": None}, {"expires_at": {"$gt": dt.datetime.now(dt.UTC)}}]
    cursor = db.mqtt_msg.find(query, {"msgid": 1, **_FIELDS}).sort(ORDER).limit(opts.max_returned_count + 1)
    docs = [doc async for doc in cursor]
    more = len(docs) > opts.max_returned_count
    docs = docs[: opts.max_returned_count]
    sent = await ctx.deliver(event, [_delivery(doc, event, retain=False) for doc in docs])
    if more and docs and ctx.pager is not None:
        ctx.pager.track(job, [(d.msgid, d.qos) for d in sent], docs[-1]["_id"])


async def fetch_for_queue(db: Database, ctx: FunctionContext, job: Job) -> None:
    await _fetch(db, ctx, job, pubsub=False)


async def fetch_for_pubsub(db: Database, ctx: FunctionContext, job: Job) -> None:
    await _fetch(db, ctx, job, pubsub=True)


READERS: dict[str, Reader] = {
    "on_subscribe_lookup": subscribe_lookup,
    "on_retain_lookup": retain_lookup,
    "on_message_fetch_for_queue": fetch_for_queue,
    "on_message_fetch_for_pubsub": fetch_for_pubsub,
}
