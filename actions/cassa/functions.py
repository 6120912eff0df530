"""The write functions: jobs into prepared CQL statements with bound values.

Every write is idempotent and independent of the order it runs in, which is
what lets the backend run a batch's writes concurrently:
- messages are keyed by (topic, bucket, msgid): a replay rewrites the same row;
- client status and retained messages carry USING TIMESTAMP = the event's own
  time (the msgid's time for retain), so the newest event wins whatever order
  writes land in, and a retain delete's tombstone removes only older messages;
- offsets move by lightweight transaction (`IF msgid < ?`), so only forward,
  and only where a pubsub fetch created one.
"""

from __future__ import annotations

import datetime as dt
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

from actions.cassa.schema import BUCKET_SECONDS
from bridge.backend import Job, Writers, writers
from bridge.events import (
    ClientConnected,
    ClientDisconnected,
    MessageAcked,
    MessagePublish,
    SessionUnsubscribed,
    placeholder_value,
)
from bridge.msgid import timestamp_us

_BUCKET_US = BUCKET_SECONDS * 1_000_000
NO_BUCKET = 2**31 - 1

# Prepared once per pool when it connects; {ks} is the pool's keyspace.
STATEMENTS: dict[str, str] = {
    "connected": "UPDATE {ks}.client USING TIMESTAMP ? SET state = 1, node = ?, online_at = ? WHERE clientid = ?",
    "disconnected": "UPDATE {ks}.client USING TIMESTAMP ? SET state = 0, offline_at = ? WHERE clientid = ?",
    # TTL 0 means no expiry: one statement for rules with and without expired_time.
    "store": "INSERT INTO {ks}.msg (topic, bucket, msgid, sender, qos, retain, payload, arrived) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?",
    "bucket": "INSERT INTO {ks}.msg_bucket (topic, bucket) VALUES (?, ?)",
    "topic": "INSERT INTO {ks}.topic (root, topic) VALUES (?, ?)",
    # TTL: a retained MQTT 5 message's expiry (0: none).
    "retain": "INSERT INTO {ks}.retain (topic, msgid, sender, qos, payload, arrived) VALUES (?, ?, ?, ?, ?, ?) "
    "USING TIMESTAMP ? AND TTL ?",
    "retain_delete": "DELETE FROM {ks}.retain USING TIMESTAMP ? WHERE topic = ?",
    "ack_queue": "DELETE FROM {ks}.msg WHERE topic = ? AND bucket = ? AND msgid = ?",
    "ack_pubsub": "UPDATE {ks}.acked SET msgid = ? WHERE clientid = ? AND topic = ? IF msgid < ?",
    "acked_delete": "DELETE FROM {ks}.acked WHERE clientid = ? AND topic = ? IF EXISTS",
    "event_log": "INSERT INTO {ks}.event_log (day, ts, id, event, clientid, username, node, topic, qos, bytes, "
    "reason, peername, msgid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
}


@dataclass(frozen=True, slots=True)
class Write:
    name: str  # a key of STATEMENTS (or of reads.QUERIES)
    args: tuple[Any, ...]
    # Writes with the same group key touch one partition and may share one unlogged batch.
    group: tuple[Any, ...] | None = None
    # An index row: written once per process (`once` is its identity).
    once: tuple[Any, ...] | None = None
    # Of several writes with the same group, only the one with the greatest args[0] is needed.
    latest: bool = False
    size: int = 0  # bytes it adds to a batch


def micros(seconds: float) -> int:
    return int(seconds * 1_000_000)


def message_micros(msgid: str, fallback: float) -> int:
    """The write timestamp of a message's cells: its msgid's time (publish order)."""
    try:
        return timestamp_us(msgid)
    except ValueError:
        return micros(fallback)


def ttl_left(arrived: float, kept_for: int | None) -> int:
    """The row's TTL (0: none), counted from when the message arrived, not from this write: a write
    replayed from the spool long after does not keep the message past its expiry. A message already
    past it gets 1 s, the least TTL (its row is written, for the write to be the same everywhere)."""
    if not kept_for:
        return 0
    return max(1, math.ceil(arrived + kept_for - time.time()))


def bucket_of(msgid: str) -> int:
    """The hour bucket of a message ('' and unparsable ids: bucket 0)."""
    try:
        return min(timestamp_us(msgid) // _BUCKET_US, NO_BUCKET) if msgid else 0
    except ValueError:
        return 0


def bucket_at(seconds: float) -> int:
    return int(seconds // BUCKET_SECONDS)


def root_of(topic: str) -> str:
    return topic.split("/", 1)[0]


def when(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def topic_index(topic: str) -> Write:
    return Write("topic", (root_of(topic), topic), once=("topic", topic))


def connected(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, ClientConnected)
    args = (micros(event.timestamp), event.node, when(event.timestamp), event.clientid)
    return [Write("connected", args)]


def disconnected(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, ClientDisconnected)
    return [Write("disconnected", (micros(event.timestamp), when(event.timestamp), event.clientid))]


def store(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, MessagePublish)
    bucket = bucket_of(event.msgid)
    args = (
        event.topic,
        bucket,
        event.msgid,
        event.clientid,
        event.qos,
        event.retain,
        event.payload,
        when(event.timestamp),
        ttl_left(event.timestamp, event.kept_for(job.rule.expired_time)),
    )
    size = len(event.payload) + len(event.topic) + len(event.clientid) + 64
    return [
        Write("store", args, group=("msg", event.topic, bucket), size=size),
        Write("bucket", (event.topic, bucket), once=("bucket", event.topic, bucket)),
        topic_index(event.topic),
    ]


def retain(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, MessagePublish)
    stamp = message_micros(event.msgid, event.timestamp)
    ttl = ttl_left(event.timestamp, event.kept_for(None))  # the message's own expiry (MQTT 5), 0: none
    args = (event.topic, event.msgid, event.clientid, event.qos, event.payload, when(event.timestamp), stamp, ttl)
    return [Write("retain", args), topic_index(event.topic)]


def retain_delete(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, MessagePublish)
    return [Write("retain_delete", (message_micros(event.msgid, event.timestamp), event.topic))]


def acked_for_queue(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, MessageAcked)
    return [Write("ack_queue", (event.topic, bucket_of(event.msgid), event.msgid))]


def acked_for_pubsub(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, MessageAcked)
    return [
        Write(
            "ack_pubsub",
            (event.msgid, event.clientid, topic, event.msgid),
            group=("acked", event.clientid, topic),
            latest=True,
        )
        for topic in event.filters or (event.topic,)
    ]


def acked_delete(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, SessionUnsubscribed)
    return [Write("acked_delete", (event.clientid, event.topic))]


_LOG_TEXT = ("clientid", "username", "node", "topic")


def event_log(job: Job) -> list[Write]:
    event = job.event
    payload = getattr(event, "payload", None)
    texts = [placeholder_value(event, name) if hasattr(event, name) else None for name in _LOG_TEXT]
    msgid = getattr(event, "msgid", None)
    # A replayed event gets the same id, so it rewrites its own row instead of adding one.
    identity = (str(event.hookpoint), *texts, msgid, getattr(event, "reason", None), repr(event.timestamp))
    row_id = str(uuid.uuid5(uuid.NAMESPACE_OID, repr(identity)))
    at = when(event.timestamp)
    args = (
        at.date(),
        at,
        row_id,
        str(event.hookpoint),
        *texts,
        getattr(event, "qos", None),
        len(payload) if payload is not None else None,
        getattr(event, "reason", None),
        getattr(event, "peername", None),
        msgid,
    )
    size = 200 + sum(len(t) for t in texts if isinstance(t, str))
    return [Write("event_log", args, group=("event_log", at.date()), size=size)]


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
