"""The read-then-act functions: proxy subscription, retain lookup, offline fetch.

They read Redis, then act through the broker (subscribe a client, deliver to
one session). The backend flushes the batch's pending writes before each one.
Wildcard subscriptions find their topics in the topic index (index.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from actions.redis import keys, scripts
from actions.redis.index import MSG, RETAIN, TopicIndex
from bridge.backend import FunctionContext, Job
from bridge.brokers.base import Delivery
from bridge.events import ClientConnected, SessionSubscribed
from bridge.topics import is_wildcard

log = logging.getLogger(__name__)

# redis.asyncio.Redis with protocol 2: replies are bytes. Its stubs type them as unions, hence Any.
Redis = Any
Reader = Callable[[TopicIndex, FunctionContext, Job], Awaitable[None]]


async def subscribe_lookup(index: TopicIndex, ctx: FunctionContext, job: Job) -> None:
    redis = index.redis
    event = job.event
    assert isinstance(event, ClientConnected)
    stored = await redis.hgetall(keys.subs(event.clientid))
    entries = [(keys.dec(topic), int(qos) if qos.isdigit() else qos) for topic, qos in sorted(stored.items())]
    await ctx.proxy_subscribe(event.clientid, entries)


def _delivery(fields: dict[bytes, bytes], sub_qos: int, retain: bool, topic_filter: str) -> Delivery:
    return Delivery(
        msgid=fields[b"id"].decode(),
        topic=keys.dec(fields[b"topic"]),
        payload=fields.get(b"payload", b""),
        qos=min(int(fields.get(b"qos", b"0")), sub_qos),
        retain=retain,
        from_clientid=keys.dec(fields.get(b"from", b"")),
        filter=topic_filter,
    )


async def retain_lookup(index: TopicIndex, ctx: FunctionContext, job: Job) -> None:
    redis = index.redis
    event = job.event
    assert isinstance(event, SessionSubscribed)  # a new subscription (registry `applies`)
    if ctx.publishes_committed is not None:
        await ctx.publishes_committed(job.seq)
    topics = await index.matching(RETAIN, event.topic)
    topics = [t for t in topics if t not in event.retained_sent]
    pipe = redis.pipeline(transaction=False)
    for topic in topics:
        pipe.zrange(keys.retain(topic), 0, 0)
    replies = await pipe.execute()
    ids = [members[0].decode() for members in replies if members]
    for msgid in ids:
        pipe.hgetall(keys.message(msgid))
    found = [fields for fields in await pipe.execute() if fields]
    await ctx.deliver(event, [_delivery(f, event.qos, True, event.topic) for f in found])
    if is_wildcard(event.topic):  # an index entry whose set was deleted by hand: drop it
        for topic in (topic for topic, members in zip(topics, replies, strict=True) if not members):
            await index.forget(RETAIN, topic)


@dataclass(frozen=True, slots=True)
class _Window:
    after: str | None  # deliver ids greater than this
    before: str | None  # and smaller than this (live_from_msgid)
    min_score: float  # time_range lower bound, ms
    limit: int


async def _candidates(redis: Redis, topics: list[str], window: _Window) -> tuple[list[tuple[int, str, str]], bool]:
    """Up to `limit` (score, msgid, topic) in publish order across topics, and whether more wait."""
    upper: Any = keys.score(window.before) if window.before else "+inf"
    lower_score = keys.score(window.after) if window.after else None
    pipe = redis.pipeline(transaction=False)
    for topic in topics:
        key = keys.topic_list(topic)
        if lower_score is not None:
            # Same-millisecond ids sort by id inside one score; read that score whole.
            pipe.zrangebyscore(key, lower_score, lower_score, withscores=True)
            pipe.zrangebyscore(key, f"({lower_score}", upper, start=0, num=window.limit + 1, withscores=True)
        else:
            pipe.zrangebyscore(key, window.min_score, upper, start=0, num=window.limit + 1, withscores=True)
    replies = await pipe.execute()
    per_topic = 2 if lower_score is not None else 1
    found: list[tuple[int, str, str]] = []
    for index, topic in enumerate(topics):
        for reply in replies[index * per_topic : (index + 1) * per_topic]:
            for member, member_score in reply:
                msgid = member.decode()
                after_ok = window.after is None or msgid > window.after
                before_ok = window.before is None or msgid < window.before
                if after_ok and before_ok and member_score >= window.min_score:
                    found.append((int(member_score), msgid, topic))
    found.sort()
    return found[: window.limit], len(found) > window.limit


async def _fetch(index: TopicIndex, ctx: FunctionContext, job: Job, pubsub: bool) -> None:
    redis = index.redis
    event = job.event
    assert isinstance(event, SessionSubscribed)
    # A new persistent QoS>0 subscription (registry `applies`), or the next page (cursor).
    if job.cursor is None and ctx.publishes_committed is not None:
        await ctx.publishes_committed(job.seq)
    topics = await index.matching(MSG, event.topic)
    after = job.cursor
    if pubsub and after is None:
        offset = await _offset(redis, event)
        if offset is _REFUSED:
            return
        if offset is None:
            # First subscription: start after the newest stored message, deliver nothing.
            newest = await _newest(redis, topics, event.live_from_msgid)
            await _offset_create(redis, event, newest or "0")
            return
        after = None if offset == "0" else offset
    opts = job.rule.offline_opts
    min_score = (time.time() - opts.time_range) * 1000 if opts.time_range else float("-inf")
    window = _Window(after, event.live_from_msgid, min_score, opts.max_returned_count)
    while True:
        page, more = await _candidates(redis, topics, window)
        deliveries = await _load(index, page, event)
        if deliveries or not more or not page:
            break
        window = _Window(page[-1][1], window.before, window.min_score, window.limit)  # all expired: next page
    sent = await ctx.deliver(event, deliveries)
    if more and page and ctx.pager is not None:
        ctx.pager.track(job, [(d.msgid, d.qos) for d in sent], page[-1][1])


_REFUSED = "refused"


async def _offset(redis: Redis, event: SessionSubscribed) -> str | None:
    """The subscription's pubsub offset, None before its first fetch, _REFUSED if another client's."""
    key = keys.acked(event.clientid, event.topic)
    ambiguous = 1 if keys.acked_ambiguous(event.clientid, event.topic) else 0
    reply = await redis.eval(scripts.OFFSET_GET, 2, key, keys.ACKED_OWNER, keys.enc(event.clientid), ambiguous)
    if reply[0] == 0:
        _refused(event)
        return _REFUSED
    return reply[1].decode() if reply[0] == 2 else None


async def _offset_create(redis: Redis, event: SessionSubscribed, first: str) -> None:
    key = keys.acked(event.clientid, event.topic)
    ambiguous = 1 if keys.acked_ambiguous(event.clientid, event.topic) else 0
    created = await redis.eval(
        scripts.OFFSET_CREATE, 2, key, keys.ACKED_OWNER, keys.enc(event.clientid), ambiguous, first
    )
    if not created:
        _refused(event)


def _refused(event: SessionSubscribed) -> None:
    log.warning(
        "client %r, filter %r: its pubsub offset key is another client's (a `:` in both makes them one key);"
        " no offline messages for this subscription",
        event.clientid,
        event.topic,
    )


async def _load(index: TopicIndex, page: list[tuple[int, str, str]], event: SessionSubscribed) -> list[Delivery]:
    pipe = index.redis.pipeline(transaction=False)
    for _, msgid, _ in page:
        pipe.hgetall(keys.message(msgid))
    deliveries: list[Delivery] = []
    expired: dict[str, list[str]] = {}
    for (_, msgid, topic), fields in zip(page, await pipe.execute(), strict=True):
        if fields:
            deliveries.append(_delivery(fields, event.qos, False, event.topic))
        else:
            expired.setdefault(topic, []).append(msgid)
    for topic, msgids in expired.items():  # lazy trim: the hashes expired, drop their list entries
        await index.forget(MSG, topic, msgids, client=pipe)
    if expired:
        await pipe.execute()
    return deliveries


async def _newest(redis: Redis, topics: list[str], before: str | None) -> str | None:
    upper: Any = keys.score(before) if before else "+inf"
    pipe = redis.pipeline(transaction=False)
    for topic in topics:
        pipe.zrevrangebyscore(keys.topic_list(topic), upper, "-inf", start=0, num=64)
    newest = None
    for members in await pipe.execute():
        for member in members:
            msgid = member.decode()
            if before is None or msgid < before:
                newest = max(newest or msgid, msgid)
                break
    return newest


async def fetch_for_queue(index: TopicIndex, ctx: FunctionContext, job: Job) -> None:
    await _fetch(index, ctx, job, pubsub=False)


async def fetch_for_pubsub(index: TopicIndex, ctx: FunctionContext, job: Job) -> None:
    await _fetch(index, ctx, job, pubsub=True)


READERS: dict[str, Reader] = {
    "on_subscribe_lookup": subscribe_lookup,
    "on_retain_lookup": retain_lookup,
    "on_message_fetch_for_queue": fetch_for_queue,
    "on_message_fetch_for_pubsub": fetch_for_pubsub,
}
