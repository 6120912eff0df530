"""Read-then-act functions on PostgreSQL: proxy subscription, retain lookup, offline fetch.

A wildcard filter finds its topics in `mqtt_topic` / `mqtt_retain` by an index
range on its literal prefix (exact MQTT matching on the few candidates), then
each topic's messages are read by the (topic, id) index, oldest first, merged.
Order is msgid order (publish order); the fetch cursor is the last msgid considered.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from actions.pgsql.functions import when
from bridge.backend import FunctionContext, Job
from bridge.brokers.base import Delivery
from bridge.events import ClientConnected, SessionSubscribed
from bridge.topics import is_wildcard, matches, prefix_range

Connection = Any  # asyncpg.Connection (untyped)
Reader = Callable[[Connection, FunctionContext, Job], Awaitable[None]]

_PAGE = """
SELECT m.msgid, m.sender, m.topic, m.qos, m.payload
FROM unnest($1::text[]) AS t(topic)
CROSS JOIN LATERAL (
    SELECT msgid, sender, topic, qos, payload FROM mqtt_msg
    WHERE mqtt_msg.topic = t.topic AND msgid > $2 AND msgid < $3 AND arrived >= $4
      AND (expires_at IS NULL OR expires_at > now())
    ORDER BY msgid LIMIT $5
) AS m
ORDER BY m.msgid LIMIT $5"""

_NEWEST = """
SELECT max(m.msgid), max(m.id) FROM unnest($1::text[]) AS t(topic)
CROSS JOIN LATERAL (
    SELECT msgid, id FROM mqtt_msg WHERE mqtt_msg.topic = t.topic AND msgid < $2 ORDER BY msgid DESC LIMIT 1
) AS m"""

_NO_UPPER = "G"  # sorts after every upper-case hex id: no live_from bound


async def matching_topics(conn: Connection, table: str, topic_filter: str) -> list[str]:
    if not is_wildcard(topic_filter):
        return [topic_filter]
    # `~>=~` / `~<~` rather than LIKE, so that even a generic prepared plan uses the
    # text_pattern_ops index.
    bounds = prefix_range(topic_filter)
    if bounds is None:
        rows = await conn.fetch(f"SELECT topic FROM {table}")
    elif bounds[1] is None:
        rows = await conn.fetch(f"SELECT topic FROM {table} WHERE topic ~>=~ $1", bounds[0])
    else:
        rows = await conn.fetch(f"SELECT topic FROM {table} WHERE topic ~>=~ $1 AND topic ~<~ $2", *bounds)
    return sorted(row["topic"] for row in rows if matches(topic_filter, row["topic"]))


async def subscribe_lookup(conn: Connection, ctx: FunctionContext, job: Job) -> None:
    event = job.event
    assert isinstance(event, ClientConnected)
    rows = await conn.fetch("SELECT topic, qos FROM mqtt_sub WHERE clientid = $1 ORDER BY topic", event.clientid)
    await ctx.proxy_subscribe(event.clientid, [(row["topic"], row["qos"]) for row in rows])


def _delivery(row: Any, event: SessionSubscribed, retain: bool) -> Delivery:
    return Delivery(
        row["msgid"],
        row["topic"],
        bytes(row["payload"]),
        min(row["qos"], event.qos),
        retain,
        row["sender"],
        event.topic,
    )


async def retain_lookup(conn: Connection, ctx: FunctionContext, job: Job) -> None:
    event = job.event
    assert isinstance(event, SessionSubscribed)  # a new subscription (registry `applies`)
    if ctx.publishes_committed is not None:
        await ctx.publishes_committed(job.seq)
    topics = [t for t in await matching_topics(conn, "mqtt_retain", event.topic) if t not in event.retained_sent]
    rows = await conn.fetch(
        "SELECT topic, msgid, sender, qos, payload FROM mqtt_retain WHERE topic = ANY($1::text[]) ORDER BY topic",
        topics,
    )
    deliveries = [_delivery(row, event, retain=True) for row in rows]
    await ctx.deliver(event, deliveries)


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
        offset = await conn.fetchval(
            "SELECT msgid FROM mqtt_acked WHERE clientid = $1 AND topic = $2", event.clientid, event.topic
        )
        if offset is None:
            # First subscription: start after the newest stored message, deliver nothing.
            newest = await conn.fetchrow(_NEWEST, topics, upper)
            await conn.execute(
                "INSERT INTO mqtt_acked (clientid, topic, msgid, mid) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                event.clientid,
                event.topic,
                newest[0] or "",
                newest[1] or 0,
            )
            return
        after = offset
    opts = job.rule.offline_opts
    since = time.time() - opts.time_range if opts.time_range else 0.0
    rows = await conn.fetch(_PAGE, topics, after, upper, when(since), opts.max_returned_count + 1)
    more = len(rows) > opts.max_returned_count
    rows = rows[: opts.max_returned_count]
    deliveries = [_delivery(row, event, retain=False) for row in rows]
    sent = await ctx.deliver(event, deliveries)
    if more and rows and ctx.pager is not None:
        ctx.pager.track(job, [(d.msgid, d.qos) for d in sent], rows[-1]["msgid"])


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
