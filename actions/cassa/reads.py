"""The store queries of the read-then-act functions on Cassandra (the protocol: bridge/fetch.py).

A wildcard filter finds its topics in the `topic` index: the partition of the
filter's first level (every partition, by their keys, when the first level is
a wildcard), matched by MQTT rules in Python. A topic's messages are read
bucket by bucket, oldest first, by clustering range (`msgid > after`), each
topic up to the page size; the topics' rows are merged in msgid (publish) order.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from actions.cassa.functions import NO_BUCKET, bucket_at, bucket_of, root_of
from actions.cassa.session import AsyncSession
from bridge.fetch import NO_UPPER, Stored, Window
from bridge.topics import matching

T = TypeVar("T")

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

_FANOUT = 64  # topics read at once by one wildcard fetch


async def _bounded(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    gate = asyncio.Semaphore(_FANOUT)

    async def one(coro: Coroutine[Any, Any, T]) -> T:
        async with gate:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


def _stored(row: Any) -> Stored:
    msgid, sender, topic, qos, payload = row[:5]
    return Stored(msgid, topic, bytes(payload or b""), qos, sender)


def _naive(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=None) if value.tzinfo else value


def _high_bucket(upper: str) -> int:
    return bucket_of(upper) if upper != NO_UPPER else NO_BUCKET


class CassaStore:
    """The pool's prepared read statements, by name, and the queries made of them."""

    def __init__(self, db: AsyncSession, prepared: dict[str, Any]) -> None:
        self.db = db
        self.prepared = prepared

    async def __call__(self, name: str, *args: Any) -> list[Any]:
        return await self.db.execute(self.prepared[name], args)

    async def message_topics(self, topic_filter: str) -> list[str]:
        return await matching(topic_filter, self._candidates)

    async def _candidates(self, topic_filter: str) -> list[str]:
        """The topics in the index partition of the filter's first level (every partition for a wildcard)."""
        first = root_of(topic_filter)
        roots = [first] if first not in ("+", "#") else [row[0] for row in await self("roots")]
        found = await _bounded([self("topics", root) for root in roots])
        return [row[0] for rows in found for row in rows]

    async def retained_topics(self, topic_filter: str) -> list[str]:
        return await self.message_topics(topic_filter)  # the `topic` index lists retained topics too

    async def subscriptions(self, clientid: str) -> list[tuple[str, Any]]:
        return [(row[0], row[1]) for row in await self("subs", clientid)]

    async def retained(self, topic_filter: str, topics: Sequence[str]) -> list[Stored]:
        found = await _bounded([self("retained", topic) for topic in topics])
        # by topic; the retain table's columns are (topic, msgid, sender, qos, payload)
        rows = sorted((row for rows in found for row in rows), key=lambda row: row[0])
        return [Stored(r[1], r[0], bytes(r[4] or b""), r[3], r[2]) for r in rows]

    async def page(self, topics: Sequence[str], window: Window, limit: int) -> list[Stored]:
        pages = await _bounded([self._topic_page(topic, window, limit) for topic in topics])
        rows = sorted((row for page in pages for row in page), key=lambda row: row[0])[:limit]
        return [_stored(row) for row in rows]

    async def _topic_page(self, topic: str, window: Window, need: int) -> list[Any]:
        """Up to `need` messages of one topic inside the window, oldest first, walking its buckets."""
        low = bucket_of(window.after)
        if window.since is not None:
            low = max(low, bucket_at(window.since))
        cutoff = None
        if window.since is not None:
            cutoff = dt.datetime.fromtimestamp(window.since, dt.UTC).replace(tzinfo=None)
        got: list[Any] = []
        for (bucket,) in await self("buckets", topic, low, _high_bucket(window.upper)):
            cursor = window.after
            while len(got) < need:
                limit = need - len(got)
                rows = await self("page", topic, bucket, cursor, window.upper, limit)
                got.extend(row for row in rows if cutoff is None or _naive(row[5]) >= cutoff)
                if len(rows) < limit:
                    break  # this bucket has no more
                cursor = rows[-1][0]
            if len(got) >= need:
                break
        return got

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        rows = await self("offset", clientid, topic_filter)
        return str(rows[0][0] or "") if rows else None

    async def start_offset(self, clientid: str, topic_filter: str, topics: Sequence[str], before: str | None) -> None:
        upper = before or NO_UPPER
        newest = max(await _bounded([self._newest(topic, upper) for topic in topics]), default="")
        await self("offset_create", clientid, topic_filter, newest)

    async def _newest(self, topic: str, upper: str) -> str:
        for (bucket,) in await self("buckets_desc", topic, _high_bucket(upper)):
            rows = await self("newest", topic, bucket, upper)
            if rows:
                return str(rows[0][0])
        return ""
