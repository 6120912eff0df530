"""The write functions of the SQL backends (actions/pgsql, actions/mysql): the same tables, so the
same values bound in the same order; each dialect brings its statements (`Statements`), its time
values (`when`), its multi-row inserts and its pubsub ack (which differ in more than the markers).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.backend import Job, W, Writer, Writers, writers
from bridge.batches import Merged
from bridge.events import (
    ClientConnected,
    ClientDisconnected,
    MessageAcked,
    MessagePublish,
    SessionUnsubscribed,
    placeholder_value,
)

Clock = Callable[[float], dt.datetime]  # an event's timestamp as the driver's time value


@dataclass(frozen=True, slots=True)
class Statements:
    """A dialect's statement per write function; each binds the values named here, in this order."""

    connected: str  # clientid, node, online_at, event_at (the same time twice)
    disconnected: str  # clientid, node, offline_at, event_at (the same time twice)
    retain: str  # topic, msgid, sender, qos, payload, arrived, expires_at (an mqtt_retain row)
    retain_delete: str  # topic, msgid
    acked_for_queue: str  # msgid
    acked_delete: str  # clientid, topic


def _expires(arrived: dt.datetime, seconds: float | None) -> dt.datetime | None:
    return arrived + dt.timedelta(seconds=seconds) if seconds else None


def message_row(job: Job, when: Clock) -> tuple[Any, ...]:
    """An mqtt_msg row: msgid, sender, topic, qos, retain, payload, arrived, expires_at."""
    event = job.event
    assert isinstance(event, MessagePublish)
    arrived = when(event.timestamp)
    expires = _expires(arrived, event.kept_for(job.rule.expired_time))
    return (event.msgid, event.clientid, event.topic, event.qos, event.retain, event.payload, arrived, expires)


_LOG_TEXT = ("clientid", "username", "node", "topic")


def event_log_row(job: Job, when: Clock) -> tuple[Any, ...]:
    """An mqtt_event_log row: event, clientid, username, node, topic, qos, bytes, reason, peername, msgid, ts."""
    event = job.event
    payload = getattr(event, "payload", None)
    return (
        str(event.hookpoint),
        *(placeholder_value(event, name) if hasattr(event, name) else None for name in _LOG_TEXT),
        getattr(event, "qos", None),
        len(payload) if payload is not None else None,
        getattr(event, "reason", None),
        getattr(event, "peername", None),
        getattr(event, "msgid", None),
        when(event.timestamp),
    )


def sql_writers(
    statements: Statements,
    write: Callable[[str, Sequence[Any]], W],
    when: Clock,
    *,
    store: Merged[W],
    event_log: Merged[W],
    acked_for_pubsub: Writer[W],
) -> Writers[W]:
    """A SQL backend's WRITERS: `write` makes the dialect's write of a statement and its values."""

    def status(job: Job) -> list[W]:
        event = job.event
        assert isinstance(event, ClientConnected | ClientDisconnected)
        at = when(event.timestamp)
        sql = statements.connected if isinstance(event, ClientConnected) else statements.disconnected
        return [write(sql, (event.clientid, event.node, at, at))]

    def retain(job: Job) -> list[W]:
        event = job.event
        assert isinstance(event, MessagePublish)
        arrived = when(event.timestamp)
        expires = _expires(arrived, event.kept_for(None))  # the message's own (MQTT 5); no expired_time
        row = (event.topic, event.msgid, event.clientid, event.qos, event.payload, arrived, expires)
        return [write(statements.retain, row)]

    def retain_delete(job: Job) -> list[W]:
        event = job.event
        assert isinstance(event, MessagePublish)
        return [write(statements.retain_delete, (event.topic, event.msgid))]

    def acked_for_queue(job: Job) -> list[W]:
        assert isinstance(job.event, MessageAcked)
        return [write(statements.acked_for_queue, (job.event.msgid,))]

    def acked_delete(job: Job) -> list[W]:
        event = job.event
        assert isinstance(event, SessionUnsubscribed)
        return [write(statements.acked_delete, (event.clientid, event.topic))]

    return writers(
        connected=status,
        disconnected=status,
        publish=store,
        retain=retain,
        retain_delete=retain_delete,
        acked_for_queue=acked_for_queue,
        acked_for_pubsub=acked_for_pubsub,
        acked_delete=acked_delete,
        event_log=event_log,
    )
