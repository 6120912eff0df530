"""The store queries of the read-then-act functions on Redis (the protocol: bridge/fetch.py).

The backend flushes the batch's pending writes before each read. Wildcard
subscriptions find their topics in the topic index (index.py). A message whose
hash expired is still listed in its topic's sorted set until a read or the
periodic trim drops it: a page lists it as Gone and drops it (the lazy trim).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from actions.redis import cluster_offsets, keys, scripts
from actions.redis.index import MSG, RETAIN, TopicIndex
from bridge.backend import PermanentError
from bridge.fetch import Gone, Stored, Window
from bridge.topics import is_wildcard

log = logging.getLogger(__name__)


def wrong_type_message(key: bytes) -> str:
    return (
        f"{keys.dec(key)} is not the sorted set hookbridge keeps (EMQX 4.4 wrote it as a string or hash):"
        " its retained message is skipped; hookbridge migrate-emqx44 converts it"
    )


# redis.asyncio.Redis with protocol 2: replies are bytes. Its stubs type them as unions, hence Any.
Redis = Any
Candidate = tuple[int, str, str]  # (score, msgid, topic)

_BEFORE_EVERYTHING = "0"  # the stored offset of a subscription that had nothing to start after


def _stored(fields: dict[bytes, bytes]) -> Stored:
    return Stored(
        msgid=fields[b"id"].decode(),
        topic=keys.dec(fields[b"topic"]),
        payload=fields.get(b"payload", b""),
        qos=int(fields.get(b"qos", b"0")),
        sender=keys.dec(fields.get(b"from", b"")),
    )


class RedisStore:
    def __init__(self, index: TopicIndex) -> None:
        self.index = index
        self.redis: Redis = index.redis
        self.wrong_type: list[str] = []  # retained topics whose key is not a sorted set (take_wrong_type)

    async def subscriptions(self, clientid: str) -> list[tuple[str, Any]]:
        stored = await self.redis.hgetall(keys.subs(clientid))
        return [(keys.dec(topic), int(qos) if qos.isdigit() else qos) for topic, qos in sorted(stored.items())]

    async def retained_topics(self, topic_filter: str) -> list[str]:
        return await self.index.matching(RETAIN, topic_filter)

    async def retained(self, topic_filter: str, topics: Sequence[str]) -> list[Stored]:
        pipe = self.redis.pipeline(transaction=False)
        for topic in topics:
            pipe.zrange(keys.retain(topic), 0, 0)
        # One key of another type (EMQX's string or hash form, not migrated) must not fail the
        # lookup of the others: its reply is an error of its own, counted for its topic.
        replies = await pipe.execute(raise_on_error=False)
        usable = []
        for topic, reply in zip(topics, replies, strict=True):
            if isinstance(reply, ResponseError) and str(reply).startswith("WRONGTYPE"):
                self.wrong_type.append(topic)
                log.error("%s", wrong_type_message(keys.retain(topic)))
            elif isinstance(reply, Exception):
                raise reply
            else:
                usable.append((topic, reply))
        ids = [members[0].decode() for _, members in usable if members]
        for msgid in ids:
            pipe.hgetall(keys.message(msgid))
        found = [_stored(fields) for fields in await pipe.execute() if fields]
        if is_wildcard(topic_filter):  # an index entry whose set was deleted by hand: drop it
            for topic in (topic for topic, members in usable if not members):
                await self.index.forget(RETAIN, topic)
        return found

    def take_wrong_type(self) -> PermanentError | None:
        """The error for the retained keys of another type the last lookups met (and forget them)."""
        if not self.wrong_type:
            return None
        topics, self.wrong_type = self.wrong_type, []
        return PermanentError("; ".join(wrong_type_message(keys.retain(topic)) for topic in topics))

    async def message_topics(self, topic_filter: str) -> list[str]:
        return await self.index.matching(MSG, topic_filter)

    async def page(self, topics: Sequence[str], window: Window, limit: int) -> list[Stored | Gone]:
        return await self._load(await self._candidates(topics, window, limit))

    async def _candidates(self, topics: Sequence[str], window: Window, limit: int) -> list[Candidate]:
        """Up to `limit` (score, msgid, topic) in publish order across topics."""
        upper: Any = keys.score(window.before) if window.before else "+inf"
        lower_score = keys.score(window.after) if window.after else None
        min_score = window.since * 1000 if window.since is not None else float("-inf")
        pipe = self.redis.pipeline(transaction=False)
        for topic in topics:
            key = keys.topic_list(topic)
            if lower_score is not None:
                # Same-millisecond ids sort by id inside one score; read that score whole.
                pipe.zrangebyscore(key, lower_score, lower_score, withscores=True)
                pipe.zrangebyscore(key, f"({lower_score}", upper, start=0, num=limit, withscores=True)
            else:
                pipe.zrangebyscore(key, min_score, upper, start=0, num=limit, withscores=True)
        replies = await pipe.execute()
        per_topic = 2 if lower_score is not None else 1
        found: list[Candidate] = []
        for index, topic in enumerate(topics):
            for reply in replies[index * per_topic : (index + 1) * per_topic]:
                for member, member_score in reply:
                    msgid = member.decode()
                    before_ok = window.before is None or msgid < window.before
                    if msgid > window.after and before_ok and member_score >= min_score:
                        found.append((int(member_score), msgid, topic))
        found.sort()
        return found[:limit]

    async def _load(self, page: list[Candidate]) -> list[Stored | Gone]:
        pipe = self.redis.pipeline(transaction=False)
        for _, msgid, _ in page:
            pipe.hgetall(keys.message(msgid))
        loaded: list[Stored | Gone] = []
        expired: dict[str, list[str]] = {}
        for (_, msgid, topic), fields in zip(page, await pipe.execute(), strict=True):
            if fields:
                loaded.append(_stored(fields))
            else:
                loaded.append(Gone(msgid))
                expired.setdefault(topic, []).append(msgid)
        if expired:  # lazy trim: the hashes expired, drop their list entries
            await self.index.forget_many(MSG, expired)
        return loaded

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        """None also when the offset key is another client's: start_offset then refuses and says so."""
        key = keys.acked(clientid, topic_filter)
        ambiguous = keys.acked_ambiguous(clientid, topic_filter)
        if self.index.cluster:
            found = await cluster_offsets.get(self.redis, key, keys.enc(clientid), ambiguous)
        else:
            reply = await self.redis.eval(
                scripts.OFFSET_GET, 2, key, keys.ACKED_OWNER, keys.enc(clientid), int(ambiguous)
            )
            found = reply[1] if reply[0] == 2 else None
        if found is None:
            return None
        offset = found.decode()
        return "" if offset == _BEFORE_EVERYTHING else str(offset)

    async def start_offset(self, clientid: str, topic_filter: str, topics: Sequence[str], before: str | None) -> None:
        first = await self._newest(topics, before) or _BEFORE_EVERYTHING
        key = keys.acked(clientid, topic_filter)
        ambiguous = keys.acked_ambiguous(clientid, topic_filter)
        if self.index.cluster:
            created = await cluster_offsets.create(self.redis, key, keys.enc(clientid), ambiguous, first)
        else:
            created = await self.redis.eval(
                scripts.OFFSET_CREATE, 2, key, keys.ACKED_OWNER, keys.enc(clientid), int(ambiguous), first
            )
        if not created:
            log.warning(
                "client %r, filter %r: its pubsub offset key is another client's (a `:` in both makes them one"
                " key); no offline messages for this subscription",
                clientid,
                topic_filter,
            )

    async def _newest(self, topics: Sequence[str], before: str | None) -> str | None:
        upper: Any = keys.score(before) if before else "+inf"
        pipe = self.redis.pipeline(transaction=False)
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
