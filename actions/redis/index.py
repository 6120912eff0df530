"""The topic index: which topics have stored or retained messages (beside the seed-003 keys).

The key layout (docs/backends/redis.md#keys) has no list of its topics, so without this a wildcard fetch or retain
lookup would SCAN the whole keyspace. Two sorted sets list them, every score 0 and every
member a topic's raw bytes, so that ZRANGEBYLEX walks exactly the topics under a filter's
literal prefix:

    mqtt:index:msg      topics whose `mqtt:msg:<topic>` sorted set exists
    mqtt:index:retain   topics whose `mqtt:retain:<topic>` sorted set exists
    mqtt:index:built    "1" once both also hold the topics written before the index existed

The write scripts (scripts.py) change a topic's index entry in the same script that creates
or empties its sorted set, so the index moves atomically with the data. Data that predates
the index is added once by `ensure` (one SCAN pass); until then reads fall back to SCAN.

On a Redis Cluster no script can touch a topic's set and the index together (other slots). There
a write adds the topic after its set holds the message and moves the topic's stamp
(cluster_scripts.INDEX_TOUCH); only `forget` drops entries: it reads the stamp, sees the set
empty, and drops the entry if the stamp did not move meanwhile (INDEX_DROP). An entry whose set
is empty is harmless until then: a read finds nothing in it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from actions.redis import cluster_scripts, keys, scripts
from bridge.topics import literal_prefix, matching

log = logging.getLogger(__name__)

VERSION = b"1"  # in mqtt:index:built; a later layout of the index rebuilds it under a new number
PAGE = 1000  # topics per ZRANGEBYLEX / keys per SCAN step


@dataclass(frozen=True, slots=True)
class Kind:
    """One indexed family of sorted sets: its index key and how a topic names its set."""

    index: bytes
    prefix: bytes
    stamps: bytes = b""  # on a cluster: the hash of stamps beside the index (same slot)

    def key(self, topic: str) -> bytes:
        return self.prefix + keys.enc(topic)


MSG = Kind(keys.MSG_INDEX, keys.TOPIC_LIST_PREFIX)
RETAIN = Kind(keys.RETAIN_INDEX, keys.RETAIN_PREFIX)
_CLUSTER = {
    MSG: Kind(keys.CLUSTER_MSG_INDEX, keys.TOPIC_LIST_PREFIX, keys.CLUSTER_MSG_STAMPS),
    RETAIN: Kind(keys.CLUSTER_RETAIN_INDEX, keys.RETAIN_PREFIX, keys.CLUSTER_RETAIN_STAMPS),
}


def _after(prefix: bytes) -> bytes | None:
    """The smallest byte string above every string starting with `prefix` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def lex_ranges(topic_filter: str) -> list[tuple[bytes, bytes]]:
    """ZRANGEBYLEX (min, max) pairs covering every topic a wildcard filter can match.

    The text before the first wildcard ends at a level boundary, so every match starts with
    it, except the parent that `a/#` also matches ([MQTT-4.7.1-2]). A filter starting with a
    wildcard skips the `$` topics, which it cannot match ([MQTT-4.7.2-1]).
    """
    first = min(i for i in (topic_filter.find("+"), topic_filter.find("#")) if i >= 0)
    prefix = keys.enc(topic_filter[:first])
    if not prefix:
        return [(b"-", b"($"), (b"[%", b"+")]  # `$` = 0x24, `%` the byte after it
    upper = _after(prefix)
    ranges = [(b"[" + prefix, b"(" + upper if upper is not None else b"+")]
    if topic_filter.endswith("/#") and first == len(topic_filter) - 1:
        parent = prefix[:-1]
        ranges.insert(0, (b"[" + parent, b"[" + parent))
    return ranges


class TopicIndex:
    """Reads, keeps and builds the index of one Redis database."""

    def __init__(self, redis: Any, cluster: bool = False) -> None:
        self.redis = redis  # redis.asyncio.Redis or RedisCluster, protocol 2 (replies are bytes)
        self.cluster = cluster
        self.kinds = dict(_CLUSTER) if cluster else {MSG: MSG, RETAIN: RETAIN}
        self.ready = False  # the marker was seen: the index is complete
        self._building = asyncio.Lock()
        self._forget = redis.register_script(scripts.FORGET)
        self._add = redis.register_script(scripts.INDEX_ADD)
        self._touch = redis.register_script(cluster_scripts.INDEX_TOUCH)
        self._drop = redis.register_script(cluster_scripts.INDEX_DROP)

    async def matching(self, kind: Kind, topic_filter: str) -> list[str]:
        """The topics of `kind` (MSG or RETAIN) a filter matches, sorted; an exact topic is its own answer."""
        return await matching(topic_filter, functools.partial(self._candidates, self.kinds[kind]))

    async def _candidates(self, kind: Kind, topic_filter: str) -> list[str]:
        if self.ready:
            return [t async for page in self._walk(kind, lex_ranges(topic_filter)) for t in page]
        return [t async for page in self._scan(kind, topic_filter) for t in page]

    async def _walk(self, kind: Kind, ranges: Sequence[tuple[bytes, bytes]]) -> AsyncIterator[list[str]]:
        for low, high in ranges:
            while True:
                page = await self.redis.zrangebylex(kind.index, low, high, start=0, num=PAGE)
                yield [keys.dec(member) for member in page]
                if len(page) < PAGE:
                    break
                low = b"(" + page[-1]

    async def _scan(self, kind: Kind, topic_filter: str) -> AsyncIterator[list[str]]:
        """Before the index is built: SCAN the keys under the filter's literal prefix."""
        pattern = kind.prefix + keys.glob_escape(literal_prefix(topic_filter)) + b"*"
        async for found in self._scan_pages(pattern):
            yield [keys.dec(key[len(kind.prefix) :]) for key in found]

    async def _scan_pages(self, pattern: bytes) -> AsyncIterator[list[bytes]]:
        """The sorted sets whose names match, a page at a time (on a cluster: every master's)."""
        if self.cluster:
            page: list[bytes] = []
            async for key in self.redis.scan_iter(match=pattern, count=PAGE, _type="zset"):
                page.append(key)
                if len(page) == PAGE:
                    yield page
                    page = []
            yield page
            return
        cursor = None
        while cursor != 0:
            cursor, found = await self.redis.scan(cursor or 0, match=pattern, count=PAGE, _type="zset")
            yield found

    async def forget(self, kind: Kind, topic: str, members: Sequence[bytes | str] = ()) -> None:
        """Remove members from a topic's sorted set, and the topic from the index once it is empty."""
        kind = self.kinds[kind]
        if not self.cluster:
            await self._forget(keys=[kind.key(topic), kind.index], args=[keys.enc(topic), *members])
            return
        # The stamp first, then the set: a write that lands after the stamp was read moves it,
        # and the drop is skipped (cluster_scripts.INDEX_DROP).
        stamp = await self.redis.hget(kind.stamps, keys.enc(topic)) or b""
        for start in range(0, len(members), PAGE):
            await self.redis.zrem(kind.key(topic), *members[start : start + PAGE])
        if not await self.redis.exists(kind.key(topic)):
            await self._drop(keys=[kind.index, kind.stamps], args=[keys.enc(topic), stamp])

    async def forget_many(self, kind: Kind, members: dict[str, list[str]]) -> None:
        """`forget` for several topics: one pipeline on a single server."""
        if self.cluster:
            for topic, gone in members.items():
                await self.forget(kind, topic, gone)
            return
        pipe = self.redis.pipeline(transaction=False)
        for topic, gone in members.items():
            await self._forget(keys=[kind.key(topic), kind.index], args=[keys.enc(topic), *gone], client=pipe)
        await pipe.execute()

    async def ensure(self) -> None:
        """Make the index complete: nothing when the marker is there, else index what predates it.

        Safe beside concurrent writers: the write scripts keep the index themselves, and each
        topic found here is added only if its sorted set still exists, checked inside one script.
        """
        if self.ready:
            return
        async with self._building:
            if self.ready:
                return
            if await self.redis.get(keys.INDEX_BUILT) != VERSION:
                added = await self._build()
                await self.redis.set(keys.INDEX_BUILT, VERSION)
                log.info("Redis topic index built: %d topics with stored or retained messages", added)
            self.ready = True

    async def _build(self) -> int:
        added = 0
        async for found in self._scan_pages(keys.PREFIX + b"*"):
            for kind in (self.kinds[MSG], self.kinds[RETAIN]):
                sets = [key for key in found if key.startswith(kind.prefix)]
                if not sets:
                    continue
                topics = [key[len(kind.prefix) :] for key in sets]
                if self.cluster:  # a set deleted meanwhile leaves an empty entry, which `forget` drops
                    added += await self._touch(keys=[kind.index, kind.stamps], args=topics)
                else:
                    added += await self._add(keys=[kind.index, *sets], args=topics)
        return int(added)

    def recheck(self) -> None:
        """Redis may have been replaced under us (it lost its script cache): check the marker again."""
        self.ready = False

    async def trim_expired(self) -> None:
        """The periodic trim: drop ids whose message hash expired; empty topics leave the index."""
        async for topics in self._every_topic(self.kinds[MSG]):
            for topic in topics:
                await self._trim_topic(topic)

    async def prune(self) -> None:
        """On a cluster: drop the entries of topics whose sorted set is gone (a write never drops
        one there; on a single server the script that empties a set drops its entry)."""
        for kind in (MSG, RETAIN):
            async for topics in self._every_topic(self.kinds[kind]):
                pipe = self.redis.pipeline(transaction=False)
                for topic in topics:
                    pipe.exists(self.kinds[kind].key(topic))
                for topic, exists in zip(topics, await pipe.execute(), strict=True):
                    if not exists:
                        await self.forget(kind, topic)

    async def _every_topic(self, kind: Kind) -> AsyncIterator[list[str]]:
        if self.ready:
            async for page in self._walk(kind, [(b"-", b"+")]):
                yield page
        else:
            async for page in self._scan(kind, "#"):
                yield page

    async def _trim_topic(self, topic: str) -> None:
        members = await self.redis.zrange(MSG.key(topic), 0, -1)
        gone: list[bytes] = []
        for start in range(0, len(members), PAGE):
            chunk = members[start : start + PAGE]
            pipe = self.redis.pipeline(transaction=False)
            for member in chunk:
                pipe.exists(keys.MESSAGE_PREFIX + member)
            gone += [m for m, alive in zip(chunk, await pipe.execute(), strict=True) if not alive]
        if not members:  # an index entry without its set (deleted by hand): drop it
            await self.forget(MSG, topic)
        for start in range(0, len(gone), PAGE):
            await self.forget(MSG, topic, gone[start : start + PAGE])
