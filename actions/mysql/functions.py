"""The write functions: jobs into SQL statements with `%s` parameters (the driver's paramstyle).

Message and event-log inserts of a run of jobs go out as multi-row INSERTs, cut so that no
statement grows past `MAX_STATEMENT_BYTES` (a server's `max_allowed_packet` is 16 MB by default
on MariaDB); the other functions write a row or two per job. Every write is idempotent:
`ON DUPLICATE KEY UPDATE` on msgid or (clientid, topic), and conditional updates that only move
forward in event time or message-id order. What each binds is shared with PostgreSQL
(actions/sqlwriters.py); the statements here are MySQL's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from actions.sqlwriters import Statements, event_log_row, message_row, sql_writers
from bridge.backend import Job, Writers
from bridge.batches import Merged
from bridge.events import MessageAcked

MAX_STATEMENT_BYTES = 4 << 20  # payload bytes per multi-row INSERT; one larger message goes alone


@dataclass(frozen=True, slots=True)
class Write:
    sql: str
    args: Sequence[Any]


def when(seconds: float) -> dt.datetime:
    """A DATETIME(6) value: UTC, naive (the session's time zone is UTC too)."""
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).replace(tzinfo=None)


# MySQL applies ON DUPLICATE KEY assignments left to right, each seeing the ones before:
# event_at is compared in every IF and moved last.
_NEWER = "event_at <= VALUES(event_at)"
_CONNECTED = f"""
INSERT INTO mqtt_client (clientid, state, node, online_at, event_at) VALUES (%s, 1, %s, %s, %s)
ON DUPLICATE KEY UPDATE state = IF({_NEWER}, 1, state), node = IF({_NEWER}, VALUES(node), node),
    online_at = IF({_NEWER}, VALUES(online_at), online_at), event_at = GREATEST(event_at, VALUES(event_at))"""

_DISCONNECTED = f"""
INSERT INTO mqtt_client (clientid, state, node, offline_at, event_at) VALUES (%s, 0, %s, %s, %s)
ON DUPLICATE KEY UPDATE state = IF({_NEWER}, 0, state),
    offline_at = IF({_NEWER}, VALUES(offline_at), offline_at), event_at = GREATEST(event_at, VALUES(event_at))"""

_STORE = "INSERT INTO mqtt_msg (msgid, sender, topic, qos, retain, payload, arrived, expires_at) VALUES "
_STORE_ROW = "(%s, %s, %s, %s, %s, %s, %s, %s)"
_STORE_TAIL = " ON DUPLICATE KEY UPDATE msgid = msgid"  # a replay, or publish + store of one message
_TOPICS = "INSERT INTO mqtt_topic (topic) VALUES "
_TOPICS_TAIL = " ON DUPLICATE KEY UPDATE topic = topic"

# Last writer wins by message id (time order), so a replayed older retain changes nothing.
_OLDER = "msgid < VALUES(msgid)"
_RETAIN = f"""
INSERT INTO mqtt_retain (topic, msgid, sender, qos, payload, arrived, expires_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON DUPLICATE KEY UPDATE sender = IF({_OLDER}, VALUES(sender), sender), qos = IF({_OLDER}, VALUES(qos), qos),
    payload = IF({_OLDER}, VALUES(payload), payload), arrived = IF({_OLDER}, VALUES(arrived), arrived),
    expires_at = IF({_OLDER}, VALUES(expires_at), expires_at),
    msgid = GREATEST(msgid, VALUES(msgid))"""

_RETAIN_DELETE = "DELETE FROM mqtt_retain WHERE topic = %s AND msgid < %s"

_ACK_QUEUE = "DELETE FROM mqtt_msg WHERE msgid = %s"

# Only offsets a pubsub fetch created move, and only forward: msgid by id order (time-ordered
# text), mid by GREATEST (row ids are insert order; no row yet leaves it as it is).
_ACK_PUBSUB = """
UPDATE mqtt_acked SET mid = GREATEST(mid, COALESCE((SELECT id FROM mqtt_msg WHERE msgid = %s), 0)), msgid = %s
WHERE clientid = %s AND topic IN ({filters}) AND msgid < %s"""

_ACKED_DELETE = "DELETE FROM mqtt_acked WHERE clientid = %s AND topic = %s"

_EVENT_LOG = (
    "INSERT INTO mqtt_event_log (event, clientid, username, node, topic, qos, bytes, reason, peername, msgid, ts) "
    "VALUES "
)
_EVENT_LOG_ROW = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


def _chunks(rows: Sequence[tuple[Any, ...]], size: Callable[[tuple[Any, ...]], int]) -> Iterator[list[tuple[Any, ...]]]:
    chunk: list[tuple[Any, ...]] = []
    total = 0
    for row in rows:
        if chunk and total + size(row) > MAX_STATEMENT_BYTES:
            yield chunk
            chunk, total = [], 0
        chunk.append(row)
        total += size(row)
    if chunk:
        yield chunk


def _multi_row(head: str, row_marks: str, rows: list[tuple[Any, ...]], tail: str = "") -> Write:
    return Write(head + ", ".join([row_marks] * len(rows)) + tail, [value for row in rows for value in row])


def store(jobs: Sequence[Job]) -> list[Write]:
    rows = [message_row(job, when) for job in jobs]
    # Topics first, in sorted order: two lanes inserting the same new topics lock them in one order.
    topics = [(topic,) for topic in sorted({row[2] for row in rows})]
    writes = [_multi_row(_TOPICS, "(%s)", topics, _TOPICS_TAIL)]
    for chunk in _chunks(rows, lambda row: len(row[5]) + len(row[2]) + 128):
        writes.append(_multi_row(_STORE, _STORE_ROW, chunk, _STORE_TAIL))
    return writes


def acked_for_pubsub(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, MessageAcked)
    filters = list(event.filters or (event.topic,))
    sql = _ACK_PUBSUB.format(filters=", ".join(["%s"] * len(filters)))
    return [Write(sql, (event.msgid, event.msgid, event.clientid, *filters, event.msgid))]


def event_log(jobs: Sequence[Job]) -> list[Write]:
    rows = [event_log_row(job, when) for job in jobs]
    return [_multi_row(_EVENT_LOG, _EVENT_LOG_ROW, chunk) for chunk in _chunks(rows, lambda row: 512)]


# Message and event-log inserts of a run merge into multi-row statements.
WRITERS: Writers[Write] = sql_writers(
    Statements(_CONNECTED, _DISCONNECTED, _RETAIN, _RETAIN_DELETE, _ACK_QUEUE, _ACKED_DELETE),
    Write,
    when,
    store=Merged(store),
    event_log=Merged(event_log),
    acked_for_pubsub=acked_for_pubsub,
)
