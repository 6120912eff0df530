"""Read-then-act functions on MySQL / MariaDB: proxy subscription, retain lookup, offline fetch.

A wildcard filter finds its topics in `mqtt_topic` / `mqtt_retain` by an index range on its
literal prefix (exact MQTT matching on the few candidates, with a binary collation), then each
topic's messages are read by the (topic, msgid) index, oldest first, merged in msgid order
(publish order). MariaDB has no LATERAL join: the per-topic reads are one UNION ALL statement
per slice of topics. The fetch cursor is the last msgid considered.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from actions.base import FunctionContext, Job
from actions.mysql.functions import when
from bridge.brokers.base import Delivery
from bridge.events import ClientConnected, SessionSubscribed
from bridge.topics import is_wildcard, matches, prefix_range

Connection = Any  # asyncmy.Connection (untyped)
Reader = Callable[[Connection, FunctionContext, Job], Awaitable[None]]
Row = tuple[Any, ...]

_SLICE = 100  # topics per UNION ALL statement

_PAGE_ONE = """(SELECT msgid, sender, topic, qos, payload FROM mqtt_msg
    WHERE topic = %s AND msgid > %s AND msgid < %s AND arrived >= %s
      AND (expires_at IS NULL OR expires_at > UTC_TIMESTAMP(6))
    ORDER BY msgid LIMIT %s)"""

_NEWEST_ONE = "(SELECT msgid, id FROM mqtt_msg WHERE topic = %s AND msgid < %s ORDER BY msgid DESC LIMIT 1)"

_NO_UPPER = "G"  # sorts after every upper-case hex id: no live_from bound


async def query(conn: Connection, sql: str, args: Sequence[Any] = ()) -> list[Row]:
    async with conn.cursor() as cursor:
        await cursor.execute(sql, tuple(args))
        return list(await cursor.fetchall())


async def matching_topics(conn: Connection, table: str, topic_filter: str) -> list[str]:
    if not is_wildcard(topic_filter):
        return [topic_filter]
    bounds = prefix_range(topic_filter)
    if bounds is None:
        rows = await query(conn, f"SELECT topic FROM {table}")
    elif bounds[1] is None:
        rows = await query(conn, f"SELECT topic FROM {table} WHERE topic >= %s", (bounds[0],))
    else:
        rows = await query(conn, f"SELECT topic FROM {table} WHERE topic >= %s AND topic < %s", bounds)
    return sorted(row[0] for row in rows if matches(topic_filter, row[0]))


async def _per_topic(conn: Connection, one: str, topics: list[str], args: Sequence[Any]) -> list[Row]:
    """`one` (a parenthesised SELECT taking the topic, then `args`) for every topic, UNION ALL."""
    rows: list[Row] = []
    for start in range(0, len(topics), _SLICE):
        part = topics[start : start + _SLICE]
        sql = " UNION ALL ".join([one] * len(part))
        rows += await query(conn, sql, [value for topic in part for value in (topic, *args)])
    return rows


async def subscribe_lookup(conn: Connection, ctx: FunctionContext, job: Job) -> None:
    event = job.event
    assert isinstance(event, ClientConnected)
    rows = await query(conn, "SELECT topic, qos FROM mqtt_sub WHERE clientid = %s ORDER BY topic", (event.clientid,))
    await ctx.proxy_subscribe(event.clientid, [(row[0], row[1]) for row in rows])


def _delivery(row: Row, event: SessionSubscribed, retain: bool) -> Delivery:
    msgid, sender, topic, qos, payload = row
    return Delivery(msgid, topic, bytes(payload), min(qos, event.qos), retain, sender, event.topic)


async def retain_lookup(conn: Connection, ctx: FunctionContext, job: Job) -> None:
    event = job.event
    assert isinstance(event, SessionSubscribed)  # a new subscription (registry `applies`)
    if ctx.publishes_committed is not None:
        await ctx.publishes_committed(job.seq)
    topics = [t for t in await matching_topics(conn, "mqtt_retain", event.topic) if t not in event.retained_sent]
    one = "(SELECT msgid, sender, topic, qos, payload FROM mqtt_retain WHERE topic = %s)"
    rows = sorted(await _per_topic(conn, one, topics, ()), key=lambda row: row[2])
    await ctx.deliver(event, [_delivery(row, event, retain=True) for row in rows])


async def _start_offset(conn: Connection, event: SessionSubscribed, topics: list[str], upper: str) -> None:
    """A first pubsub subscription: its offset starts after the newest stored message."""
    newest = await _per_topic(conn, _NEWEST_ONE, topics, (upper,))
    msgid = max((row[0] for row in newest), default="")
    mid = max((row[1] for row in newest), default=0)
    async with conn.cursor() as cursor:
        await cursor.execute(
            "INSERT INTO mqtt_acked (clientid, topic, msgid, mid) VALUES (%s, %s, %s, %s)"
            " ON DUPLICATE KEY UPDATE clientid = clientid",
            (event.clientid, event.topic, msgid, mid),
        )


async def _fetch(conn: Connection, ctx: FunctionContext, job: Job, pubsub: bool) -> None:
    event = job.event
    assert isinstance(event, SessionSubscribed)
    # A new persistent QoS>0 subscription (registry `applies`), or the next page (cursor).
    if job.cursor is None and ctx.publishes_committed is not None:
        await ctx.publishes_committed(job.seq)
    topics = await matching_topics(conn, "mqtt_topic", event.topic)
    upper = event.live_from_msgid or _NO_UPPER
    after = job.cursor or ""
    if pubsub and job.cursor is None:
        offset = await query(
            conn, "SELECT msgid FROM mqtt_acked WHERE clientid = %s AND topic = %s", (event.clientid, event.topic)
        )
        if not offset:
            await _start_offset(conn, event, topics, upper)
            return
        after = offset[0][0]
    opts = job.rule.offline_opts
    since = when(time.time() - opts.time_range if opts.time_range else 0.0)
    limit = opts.max_returned_count + 1
    rows = sorted(await _per_topic(conn, _PAGE_ONE, topics, (after, upper, since, limit)), key=lambda row: row[0])
    more = len(rows) > opts.max_returned_count
    rows = rows[: opts.max_returned_count]
    sent = await ctx.deliver(event, [_delivery(row, event, retain=False) for row in rows])
    if more and rows and ctx.pager is not None:
        ctx.pager.track(job, [(d.msgid, d.qos) for d in sent], rows[-1][0])


async def fetch_for_queue(conn: Connection, ctx: FunctionContext, job: Job) -> None:
    await _fetch(conn, ctx, job, pubsub=False)


async def fetch_for_pubsub(conn: Connection, ctx: FunctionContext, job: Job) -> None:
    await _fetch(conn, ctx, job, pubsub=True)


READERS: dict[str, Reader] = {
    "on_subscribe_lookup": subscribe_lookup,
    "on_retain_lookup": retain_lookup,
    "on_message_fetch_for_queue": fetch_for_queue,
    "on_message_fetch_for_pubsub": fetch_for_pubsub,
}
