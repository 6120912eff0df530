"""The write functions: jobs into SQL statements with bind parameters.

Message and event-log inserts of a run of jobs are merged into one
multi-row statement each (COPY into a staging table, arrays through `unnest`),
so a batch of 500 messages is one round trip; the other functions write a row
or two per job. What each binds is shared with MySQL (actions/sqlwriters.py);
the statements here are PostgreSQL's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from actions.sqlwriters import Statements, event_log_row, message_row, sql_writers
from bridge.backend import Job, Writers
from bridge.batches import Merged
from bridge.events import MessageAcked


@dataclass(frozen=True, slots=True)
class Write:
    sql: str
    args: Sequence[Any]
    coerce: bool = False  # user SQL: convert args to the parameter types first
    stage: Sequence[tuple[Any, ...]] | None = None  # rows to COPY into mqtt_msg_stage first
    on_duplicate: str | None = None  # run this instead when `sql` hits a unique violation


def when(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


_CONNECTED = """
INSERT INTO mqtt_client (clientid, state, node, online_at, event_at) VALUES ($1, 1, $2, $3, $4)
ON CONFLICT (clientid) DO UPDATE SET state = 1, node = EXCLUDED.node, online_at = EXCLUDED.online_at,
    event_at = EXCLUDED.event_at
WHERE mqtt_client.event_at <= EXCLUDED.event_at"""

_DISCONNECTED = """
INSERT INTO mqtt_client (clientid, state, node, offline_at, event_at) VALUES ($1, 0, $2, $3, $4)
ON CONFLICT (clientid) DO UPDATE SET state = 0, offline_at = EXCLUDED.offline_at, event_at = EXCLUDED.event_at
WHERE mqtt_client.event_at <= EXCLUDED.event_at"""

# Message rows go in by COPY into a per-connection temporary staging table (created when the
# pool opens the connection, emptied at every commit), then into mqtt_msg in one statement:
# COPY is the fastest way in, ON CONFLICT makes a replay (or publish + store on one message) a no-op.
STAGE_TABLE = """
CREATE TEMP TABLE IF NOT EXISTS mqtt_msg_stage (
    msgid text, sender text, topic text, qos int2, retain bool, payload bytea,
    arrived timestamptz, expires_at timestamptz
) ON COMMIT DELETE ROWS"""
STAGE_COLUMNS = ("msgid", "sender", "topic", "qos", "retain", "payload", "arrived", "expires_at")

_STORE = """
WITH topics AS (
    INSERT INTO mqtt_topic (topic) SELECT DISTINCT topic FROM mqtt_msg_stage ON CONFLICT DO NOTHING
)
INSERT INTO mqtt_msg (msgid, sender, topic, qos, retain, payload, arrived, expires_at)
SELECT msgid, sender, topic, qos, retain, payload, arrived, expires_at FROM mqtt_msg_stage"""
# Tried first: a plain insert costs PostgreSQL about half of one with ON CONFLICT (no speculative
# insertion per row). Only a replay collides; then the idempotent form runs instead.
_STORE_IDEMPOTENT = _STORE + "\nON CONFLICT (msgid) DO NOTHING"

# Last writer wins by message id (time order), so a replayed older retain changes nothing.
_RETAIN = """
INSERT INTO mqtt_retain (topic, msgid, sender, qos, payload, arrived, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (topic) DO UPDATE SET msgid = EXCLUDED.msgid, sender = EXCLUDED.sender, qos = EXCLUDED.qos,
    payload = EXCLUDED.payload, arrived = EXCLUDED.arrived, expires_at = EXCLUDED.expires_at
WHERE mqtt_retain.msgid < EXCLUDED.msgid"""

_RETAIN_DELETE = "DELETE FROM mqtt_retain WHERE topic = $1 AND msgid < $2"

_ACK_QUEUE = "DELETE FROM mqtt_msg WHERE msgid = $1"

# Only offsets a pubsub fetch created move, and only forward: msgid by id order (time-ordered
# text), mid by GREATEST (row ids are insert order; NULL, no row yet, leaves it as it is).
_ACK_PUBSUB = """
UPDATE mqtt_acked a SET msgid = $3, mid = GREATEST(a.mid, (SELECT id FROM mqtt_msg WHERE msgid = $3))
WHERE a.clientid = $1 AND a.topic = ANY($2::text[]) AND a.msgid < $3"""

_ACKED_DELETE = "DELETE FROM mqtt_acked WHERE clientid = $1 AND topic = $2"

_EVENT_LOG = """
INSERT INTO mqtt_event_log (event, clientid, username, node, topic, qos, bytes, reason, peername, msgid, ts)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int2[], $7::int4[],
                     $8::text[], $9::text[], $10::text[], $11::timestamptz[])"""


def store(jobs: Sequence[Job]) -> list[Write]:
    rows = [message_row(job, when) for job in jobs]
    return [Write(_STORE, (), stage=rows, on_duplicate=_STORE_IDEMPOTENT)]


def acked_for_pubsub(job: Job) -> list[Write]:
    event = job.event
    assert isinstance(event, MessageAcked)
    return [Write(_ACK_PUBSUB, (event.clientid, list(event.filters or (event.topic,)), event.msgid))]


def event_log(jobs: Sequence[Job]) -> list[Write]:
    columns: list[list[Any]] = [[] for _ in range(11)]
    for job in jobs:
        for column, value in zip(columns, event_log_row(job, when), strict=True):
            column.append(value)
    return [Write(_EVENT_LOG, columns)]


# Message and event-log inserts of a run merge into one statement each.
WRITERS: Writers[Write] = sql_writers(
    Statements(_CONNECTED, _DISCONNECTED, _RETAIN, _RETAIN_DELETE, _ACK_QUEUE, _ACKED_DELETE),
    Write,
    when,
    store=Merged(store),
    event_log=Merged(event_log),
    acked_for_pubsub=acked_for_pubsub,
)
