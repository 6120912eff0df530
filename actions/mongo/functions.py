"""The write functions: jobs into MongoDB write operations.

Each function gives the operations of one job, tagged with their collection. The
backend sends every collection's operations of a batch as one `bulk_write`. Every
write is idempotent (a replay after a lost connection changes nothing), and every
conditional write (online status by event time, retain by msgid, offsets by msgid)
expresses its condition in the filter, so it is one atomic operation on the server.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bson.objectid import ObjectId
from pymongo import DeleteMany, DeleteOne, InsertOne, UpdateMany, UpdateOne

from actions.mongo.documents import exact_json, payload_value, seq_of, when
from bridge.backend import Job, Writers, writers
from bridge.events import (
    ClientConnected,
    ClientDisconnected,
    MessageAcked,
    MessagePublish,
    SessionUnsubscribed,
    placeholder_value,
)

DUPLICATE_KEY = 11000

_BULK_OPS: dict[str, Callable[..., Any]] = {
    "insert_one": InsertOne,
    "update_one": UpdateOne,
    "update_many": UpdateMany,
    "delete_one": DeleteOne,
    "delete_many": DeleteMany,
}


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs a microsecond more per write
class Write:
    """One write operation: a collection method and its arguments."""

    collection: str
    method: str  # insert_one, update_one, update_many, delete_one, delete_many
    args: tuple[Any, ...]  # (document,) | (filter, update) | (filter,)
    upsert: bool = False
    # A duplicate key means "already done" (a replayed insert) or "a newer one is there"
    # (a conditional upsert whose filter did not match): success, not an error.
    duplicate_ok: bool = True
    # Operations whose order matters run in an ordered bulk; the others may be regrouped.
    ordered: bool = False
    # Safe to apply twice (every function's write; not your templates' `$inc`).
    idempotent: bool = True
    # Sent instead when the server refuses this one's document (a JSON payload it cannot hold).
    fallback: Write | None = None
    # A topic for mqtt_topic: the backend skips the ones it has written already.
    topic: str | None = None

    def bulk_op(self) -> Any:
        return _BULK_OPS[self.method](*self.args, **({"upsert": True} if self.upsert else {}))

    async def run_alone(self, collection: Any) -> None:
        method = getattr(collection, self.method)
        await (method(*self.args, upsert=True) if self.upsert else method(*self.args))


def connected(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, ClientConnected)
    at = when(event.timestamp)
    return [_client(event.clientid, at, {"state": 1, "node": event.node, "online_at": at})]


def disconnected(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, ClientDisconnected)
    at = when(event.timestamp)
    return [_client(event.clientid, at, {"state": 0, "node": event.node, "offline_at": at})]


def _client(clientid: str, at: dt.datetime, fields: dict[str, Any]) -> Write:
    # Last writer wins by event time: a late `connected` matches no document (its event_at
    # is older), so its upsert tries to insert a second document for the client and hits the
    # unique index: a duplicate key, which means "a newer event is already there".
    filter_ = {"clientid": clientid, "event_at": {"$lte": at}}
    update = {"$set": {**fields, "event_at": at}, "$setOnInsert": {"created": at}}
    return Write("mqtt_client", "update_one", (filter_, update), upsert=True, ordered=True)  # ties: later wins


def payload_fields(payload: bytes, payload_format: str) -> dict[str, Any]:
    """`payload` as stored (bytes, or parsed JSON), plus the exact bytes when they differ."""
    value = payload_value(payload, payload_format)
    if isinstance(value, bytes) or exact_json(payload, value):
        return {"payload": value}
    return {"payload": value, "payload_raw": payload}  # parsed for queries, the bytes for delivery


def _as_bytes(fields: dict[str, Any], payload: bytes) -> dict[str, Any] | None:
    """The same fields with the payload as bytes, or None when it already is."""
    if isinstance(fields["payload"], bytes):
        return None
    plain = {key: value for key, value in fields.items() if key != "payload_raw"}
    plain["payload"] = payload
    return plain


def message_document(job: Job) -> dict[str, Any]:
    event = job.event
    assert isinstance(event, MessagePublish)
    arrived = when(event.timestamp)
    document: dict[str, Any] = {
        "_id": event.msgid,
        "msgid": event.msgid,
        "seq": seq_of(event.msgid),
        "sender": event.clientid,
        "topic": event.topic,
        "qos": event.qos,
        "retain": event.retain,
        **payload_fields(event.payload, job.rule.payload_format),
        "arrived": arrived,
    }
    kept_for = event.kept_for(job.rule.expired_time)
    if kept_for:
        document["expires_at"] = arrived + dt.timedelta(seconds=kept_for)
    return document


def store(job: Job) -> list[Write]:
    assert isinstance(job.event, MessagePublish)
    document = message_document(job)
    plain = _as_bytes(document, job.event.payload)
    fallback = Write("mqtt_msg", "insert_one", (plain,)) if plain is not None else None
    return [Write("mqtt_msg", "insert_one", (document,), fallback=fallback), topic_write(document["topic"])]


def topic_write(topic: str) -> Write:
    """Every topic with stored messages, for wildcard fetches (the backend skips known ones)."""
    return Write("mqtt_topic", "insert_one", ({"_id": topic},), topic=topic)


def retain(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, MessagePublish)
    # Last writer wins by msgid: an older message matches nothing, and its upsert collides
    # with the topic's document on the unique index (a no-op).
    arrived = when(event.timestamp)
    expiry = event.kept_for(None)  # the message's own (MQTT 5); a retained message has no expired_time
    fields = {
        "msgid": event.msgid,
        "sender": event.clientid,
        "qos": event.qos,
        **payload_fields(event.payload, job.rule.payload_format),
        "arrived": arrived,
        "expires_at": arrived + dt.timedelta(seconds=expiry) if expiry else None,  # None: no expiry
    }
    plain = _as_bytes(fields, event.payload)

    def upsert(values: dict[str, Any], fallback: Write | None = None) -> Write:
        # $unset: a retained message stored as JSON may be replaced by one stored as bytes
        unset = {"payload_raw": ""} if "payload_raw" not in values else {}
        update: dict[str, Any] = {"$set": values, **({"$unset": unset} if unset else {})}
        filter_ = {"topic": event.topic, "msgid": {"$lt": event.msgid}}
        return Write("mqtt_retain", "update_one", (filter_, update), upsert=True, fallback=fallback)

    return [upsert(fields, upsert(plain) if plain is not None else None)]


def retain_delete(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, MessagePublish)
    return [Write("mqtt_retain", "delete_one", ({"topic": event.topic, "msgid": {"$lt": event.msgid}},))]


def acked_for_queue(job: Job) -> list[Write]:
    assert isinstance(job.event, MessageAcked)
    return [Write("mqtt_msg", "delete_one", ({"_id": job.event.msgid},))]


def acked_for_pubsub(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, MessageAcked)
    # Only offsets a pubsub fetch created move (no upsert), and only forward ($max).
    filter_ = {"clientid": event.clientid, "topic": {"$in": list(event.filters or (event.topic,))}}
    return [Write("mqtt_acked", "update_many", (filter_, {"$max": {"msgid": event.msgid, "mid": seq_of(event.msgid)}}))]


def acked_delete(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, SessionUnsubscribed)
    return [Write("mqtt_acked", "delete_one", ({"clientid": event.clientid, "topic": event.topic},))]


_LOG_TEXT = ("clientid", "username", "node", "topic")


def event_log(job: Job) -> list[Write]:
    event = job.event
    if job.memo is None:
        job.memo = ObjectId()  # once per job: a replayed batch inserts the same _id, a no-op
    payload = getattr(event, "payload", None)
    document = {
        "_id": job.memo,
        "event": str(event.hookpoint),
        **{name: placeholder_value(event, name) if hasattr(event, name) else None for name in _LOG_TEXT},
        "qos": getattr(event, "qos", None),
        "bytes": len(payload) if payload is not None else None,
        "reason": getattr(event, "reason", None),
        "peername": getattr(event, "peername", None),
        "msgid": getattr(event, "msgid", None),
        "ts": when(event.timestamp),
    }
    return [Write("mqtt_event_log", "insert_one", (document,))]


WRITERS: Writers[Write] = writers(
    connected=connected,
    disconnected=disconnected,
    publish=store,
    retain=retain,
    retain_delete=retain_delete,
    acked_for_queue=acked_for_queue,
    acked_for_pubsub=acked_for_pubsub,
    acked_delete=acked_delete,
    event_log=event_log,
)
