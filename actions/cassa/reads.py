"""Read-then-act functions on Cassandra: proxy subscription, retain lookup, offline fetch.

A wildcard filter finds its topics in the `topic` index: the partition of the
filter's first level (every partition, by their keys, when the first level is
a wildcard), matched by MQTT rules in Python. A topic's messages are read
bucket by bucket, oldest first, by clustering range (`msgid > after`), each
topic up to the page size; the topics' rows are merged in msgid (publish)
order. Order is msgid order; the fetch cursor is the last msgid considered.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from actions.cassa.functions import NO_BUCKET, bucket_at, bucket_of, root_of
from actions.cassa.session import AsyncSession
from bridge.backend import FunctionContext, Job
from bridge.brokers.base import Delivery
from bridge.events import ClientConnected, SessionSubscribed
from bridge.topics import is_wildcard, matches

T = TypeVar("T")


class Reads:
    """The pool's prepared read statements, by name."""

    def __init__(self, db: AsyncSession, prepared: dict[str, Any]) -> None:
        self.db = db
        self.prepared = prepared

    async def __call__(self, name: str, *args: Any) -> list[Any]:
        return await self.db.execute(self.prepared[name], args)


Reader = Callable[[Reads, FunctionContext, Job], Awaitable[None]]

QUERIES: dict[str, str] = {
    "subs": "SELECT topic, qos FROM {ks}.sub WHERE clientid = ?",
    "retained": "SELECT topic, msgid, sender, qos, payload FROM {ks}.retain WHERE topic = ?",
    "roots": "SELECT DISTINCT root FROM {ks}.topic",
    "topics": "SELECT topic FROM {ks}.topic WHERE root = ?",
    "buckets": "SELECT bucket FROM {ks}.msg_bucket WHERE topic = ? AND bucket >= ? AND bucket <= ?",
    "buckets_desc": "SELECT bucket FROM {ks}.msg_bucket WHERE topic = ? AND bucket <= ? ORDER BY bucket DESC",
    "page": "SELECT msgid, sender, topic, qos, payload, arrived FROM {ks}.msg "
    "WHERE topic = ? AND bucket = ? AND msgid > ? AND msgid < ? LIMIT ?",
    "newest": "SELECT msgid FROM {ks}.msg WHERE topic = ? AND bucket = ? AND msgid < ? ORDER BY msgid DESC LIMIT 1",
    "offset": "SELECT msgid FROM {ks}.acked WHERE clientid = ? AND topic = ?",
    "offset_create": "INSERT INTO {ks}.acked (clientid, topic, msgid) VALUES (?, ?, ?) IF NOT EXISTS",
}

_NO_UPPER = "G"  # sorts after every upper-case hex id: no live_from bound
_FANOUT = 64  # topics read at once by one wildcard fetch


async def _bounded(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    gate = asyncio.Semaphore(_FANOUT)

    async def one(coro: Coroutine[Any, Any, T]) -> T:
        async with gate:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def matching_topics(q: Reads, topic_filter: str) -> list[str]:
    if not is_wildcard(topic_filter):
        return [topic_filter]
    first = root_of(topic_filter)
    roots = [first] if first not in ("+", "#") else [row[0] for row in await q("roots")]
    found = await _bounded([q("topics", root) for root in roots])
    return sorted(row[0] for rows in found for row in rows if matches(topic_filter, row[0]))


async def subscribe_lookup(q: Reads, ctx: FunctionContext, job: Job) -> None:
    event = job.event
    assert isinstance(event, ClientConnected)
    rows = await q("subs", event.clientid)
    await ctx.proxy_subscribe(event.clientid, [(row[0], row[1]) for row in rows])


def _delivery(row: Any, event: SessionSubscribed, retain: bool) -> Delivery:
    msgid, sender, topic, qos, payload = row[:5]
    return Delivery(msgid, topic, bytes(payload or b""), min(qos, event.qos), retain, sender, event.topic)


async def retain_lookup(q: Reads, ctx: FunctionContext, job: Job) -> None:
    event = job.event
    assert isinstance(event, SessionSubscribed)  # a new subscription (registry `applies`)
    if ctx.publishes_committed is not None:
        await ctx.publishes_committed(job.seq)
    topics = [t for t in await matching_topics(q, event.topic) if t not in event.retained_sent]
    found = await _bounded([q("retained", topic) for topic in topics])
    rows = sorted((row for rows in found for row in rows), key=lambda row: row[0])
    # the retain table's columns are (topic, msgid, sender, ...): put them in delivery order
    deliveries = [_delivery((r[1], r[2], r[0], r[3], r[4]), event, retain=True) for r in rows]
    await ctx.deliver(event, deliveries)


async def _topic_page(q: Reads, topic: str, after: str, upper: str, since: float | None, need: int) -> list[Any]:
    """Up to `need` messages of one topic after `after` and before `upper`, oldest first, walking its buckets."""
    low = bucket_of(after)
    if since is not None:
        low = max(low, bucket_at(since))
    high = bucket_of(upper) if upper != _NO_UPPER else NO_BUCKET
    cutoff = dt.datetime.fromtimestamp(since, dt.UTC).replace(tzinfo=None) if since is not None else None
    got: list[Any] = []
    for (bucket,) in await q("buckets", topic, low, high):
        cursor = after
        while len(got) < need:
            limit = need - len(got)
            rows = await q("page", topic, bucket, cursor, upper, limit)
            got.extend(row for row in rows if cutoff is None or _naive(row[5]) >= cutoff)
            if len(rows) < limit:
                break  # this bucket has no more
            cursor = rows[-1][0]
        if len(got) >= need:
            break
    return got


def _naive(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=None) if value.tzinfo else value


async def _newest(q: Reads, topic: str, upper: str) -> str:
    high = bucket_of(upper) if upper != _NO_UPPER else NO_BUCKET
    for (bucket,) in await q("buckets_desc", topic, high):
        rows = await q("newest", topic, bucket, upper)
        if rows:
            return str(rows[0][0])
    return ""


async def _fetch(q: Reads, ctx: FunctionContext, job: Job, pubsub: bool) -> None:
    event = job.event
    assert isinstance(event, SessionSubscribed)
    # A new persistent QoS>0 subscription (registry `applies`), or the next page (cursor).
    if job.cursor is None and ctx.publishes_committed is not None:
        await ctx.publishes_committed(job.seq)
    topics = await matching_topics(q, event.topic)
    upper = event.live_from_msgid or _NO_UPPER
    after = job.cursor or ""
    if pubsub and job.cursor is None:
        rows = await q("offset", event.clientid, event.topic)
        if not rows:
            # First subscription: start after the newest stored message, deliver nothing.
            newest = max(await _bounded([_newest(q, topic, upper) for topic in topics]), default="")
            await q("offset_create", event.clientid, event.topic, newest)
            return
        after = rows[0][0] or ""
    opts = job.rule.offline_opts
    since = time.time() - opts.time_range if opts.time_range else None
    need = opts.max_returned_count + 1
    pages = await _bounded([_topic_page(q, topic, after, upper, since, need) for topic in topics])
    rows = sorted((row for page in pages for row in page), key=lambda row: row[0])[:need]
    more = len(rows) > opts.max_returned_count
    rows = rows[: opts.max_returned_count]
    sent = await ctx.deliver(event, [_delivery(row, event, retain=False) for row in rows])
    if more and rows and ctx.pager is not None:
        ctx.pager.track(job, [(d.msgid, d.qos) for d in sent], rows[-1][0])


async def fetch_for_queue(q: Reads, ctx: FunctionContext, job: Job) -> None:
    await _fetch(q, ctx, job, pubsub=False)


async def fetch_for_pubsub(q: Reads, ctx: FunctionContext, job: Job) -> None:
    await _fetch(q, ctx, job, pubsub=True)


READERS: dict[str, Reader] = {
    "on_subscribe_lookup": subscribe_lookup,
    "on_retain_lookup": retain_lookup,
    "on_message_fetch_for_queue": fetch_for_queue,
    "on_message_fetch_for_pubsub": fetch_for_pubsub,
}
