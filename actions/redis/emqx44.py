"""Bring the Redis data EMQX 4.4 Enterprise wrote into hookbridge's layout (`hookbridge migrate-emqx44`,
through `RedisBackend.emqx44_migration`).

The keys of seed 003 are the same in both (docs/migrate-from-emqx44.md#data-in-place); what
differs is the message id, and the form of a retained key. EMQX wrote `emqx_guid` ids in several
texts over its versions (3.x/4.x: `emqx_base62` of the decimal text, ~47 characters; 2.x: base62,
~20; the rule engine: 32 hex), hookbridge the same 128-bit value in 32 hex digits, whose string
order is time order (the fetch, the offsets and the scores rely on it). Each text decodes to
exactly that value (bridge/emqx_msgid.py), so every EMQX id maps to one
hookbridge id that sorts where the message was published: EMQX's stored messages come before the
ones hookbridge stores after the switch, in one queue.

Walked, in two passes. The survey reads every id EMQX left and changes nothing: the members of
every `mqtt:msg:<topic>` sorted set, every `mqtt:retain:<topic>` in each form EMQX wrote it (a
string holding the msgid, as the 4.2.1 backend's `SET` did; a hash holding the whole message, as
the 4.4 Redis page shows; a sorted set, as hookbridge keeps it) and every `mqtt:acked:<clientid>:<filter>`
offset. Every id form EMQX wrote is read (bridge/emqx_msgid.py); one value that is no id stops the
migration there, before its first write, naming the key and the value (bridge/emqx44/survey.py).
`--dry-run` prints what the survey counted.

Then the moves. A retained string or hash becomes hookbridge's one-member sorted set: the message
hash is written under its new id first, then the key is replaced in one MULTI (one key: fine on a
Cluster too). Each sorted-set member is moved in steps that can each be repeated (copy the hash to
its new id, add the new member, drop the old hash unless the other sorted set of the topic still
names it, remove the old member), so a run stopped anywhere is finished by running it again, and a
second run finds nothing to do. A set that would end with fewer members than it had (less those
whose message had expired: EMQX had lost them already, and a fetch drops them too) stops it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actions.redis import keys
from bridge.emqx44.survey import IdSurvey, check_kept

MSG_SETS = "mqtt:msg:<topic>"
RETAIN_KEYS = "mqtt:retain:<topic>"
OFFSETS = "mqtt:acked:<clientid>:<filter>"
_BEFORE_EVERYTHING = b"0"  # an offset that names no message (reads.py)


@dataclass
class Counts:
    messages: int = 0  # sorted-set members given a hookbridge id
    retained: int = 0  # retained messages moved (any form)
    gone: int = 0  # members whose hash had expired: dropped, as a fetch would
    offsets: int = 0
    survey: IdSurvey = field(default_factory=IdSurvey)
    gone_named: list[str] = field(default_factory=list)

    def lines(self, dry_run: bool) -> list[str]:
        verb = "would move" if dry_run else "moved"
        out = [
            *self.survey.lines(),
            f"{verb} {self.messages} stored message ids, {self.retained} retained messages, "
            f"{self.offsets} pubsub offsets; {self.gone} ids of expired messages "
            f"{'would be ' if dry_run else ''}dropped",
        ]
        out += [f"expired before the migration (its message hash was gone): {item}" for item in self.gone_named[:20]]
        return out


@dataclass
class Found:
    """What the survey read: the keys of each kind, and each EMQX id with its new id."""

    # zset -> [(member, its score, new id)]
    sets: dict[bytes, list[tuple[bytes, float, str]]] = field(default_factory=dict)
    strings: dict[bytes, tuple[bytes, str]] = field(default_factory=dict)  # retain key -> (msgid, new)
    hashes: dict[bytes, str] = field(default_factory=dict)  # retain key -> new id
    offsets: dict[bytes, tuple[bytes, str]] = field(default_factory=dict)


async def _scan(redis: Any, pattern: bytes, kind: str) -> list[bytes]:
    found: list[bytes] = []
    async for key in redis.scan_iter(match=pattern, count=1000, _type=kind):
        found.append(key)
    return found


def _topic_of(key: bytes, prefix: bytes) -> bytes:
    return key[len(prefix) :]


async def survey_redis(redis: Any, survey: IdSurvey) -> Found:
    """Read every id EMQX left; change nothing."""
    found = Found()
    for prefix, table in ((keys.TOPIC_LIST_PREFIX, MSG_SETS), (keys.RETAIN_PREFIX, RETAIN_KEYS)):
        survey.note(table)
        for key in await _scan(redis, prefix + b"*", "zset"):
            members = found.sets[key] = []
            for member, score in await redis.zrange(key, 0, -1, withscores=True):
                new = survey.convert(table, f"{keys.dec(key)} member", member)
                if new is not None:
                    members.append((member, score, new))
    for key in await _scan(redis, keys.RETAIN_PREFIX + b"*", "string"):
        value = await redis.get(key)
        new = survey.convert(RETAIN_KEYS, f"{keys.dec(key)} (a string)", value)
        if new is not None:
            found.strings[key] = (value, new)
    for key in await _scan(redis, keys.RETAIN_PREFIX + b"*", "hash"):
        new = survey.convert(RETAIN_KEYS, f"{keys.dec(key)} (a hash) field id", await redis.hget(key, "id"))
        if new is not None:
            found.hashes[key] = new
    survey.note(OFFSETS)
    for key in await _scan(redis, b"mqtt:acked:*", "string"):
        value = await redis.get(key)
        if value and value != _BEFORE_EVERYTHING:
            new = survey.convert(OFFSETS, keys.dec(key), value)
            if new is not None:
                found.offsets[key] = (value, new)
    return found


async def _replace_with_set(redis: Any, key: bytes, new: str, index: bytes) -> None:
    """`key` (EMQX's string or hash) becomes hookbridge's one-member sorted set, in one MULTI."""
    pipe = redis.pipeline(transaction=True)
    pipe.delete(key)
    pipe.zadd(key, {new: keys.score(new)})
    await pipe.execute()
    await redis.zadd(index, {keys.dec(_topic_of(key, keys.RETAIN_PREFIX)): 0})


async def _retained_string(redis: Any, key: bytes, old: bytes, new: str, index: bytes) -> bool:
    """EMQX 4.2's `SET mqtt:retain:<topic> <msgid>`; the message is the `mqtt:msg:<msgid>` hash.
    False: that hash had expired, so there is nothing to serve (the key goes, as EMQX's lookup
    would have found nothing)."""
    old_hash, new_hash = keys.MESSAGE_PREFIX + old, keys.message(new)
    if not await redis.exists(new_hash):
        fields = await redis.hgetall(old_hash)
        if not fields:
            await redis.delete(key)
            return False
        fields[b"id"] = new.encode()
        await _write_retained_hash(redis, new_hash, fields)
    # The old hash goes before the key is replaced, so a run stopped in between still finds the
    # key naming it, and the new hash already there. The topic's message list may name it too:
    # its move (later) drops it then.
    topic_list = keys.TOPIC_LIST_PREFIX + _topic_of(key, keys.RETAIN_PREFIX)
    if old != new.encode() and await redis.zscore(topic_list, old) is None:
        await redis.delete(old_hash)
    await _replace_with_set(redis, key, new, index)
    return True


async def _retained_hash(redis: Any, key: bytes, new: str, index: bytes) -> None:
    """The 4.4 page's `HMSET mqtt:retain:<topic>` of the whole message: it moves to `mqtt:msg:<id>`."""
    fields = await redis.hgetall(key)
    fields[b"id"] = new.encode()
    fields.setdefault(b"topic", _topic_of(key, keys.RETAIN_PREFIX))
    fields.setdefault(b"payload", b"")
    fields[b"retain"] = b"true"
    await _write_retained_hash(redis, keys.message(new), fields)
    await _replace_with_set(redis, key, new, index)


async def _write_retained_hash(redis: Any, key: bytes, fields: dict[bytes, bytes]) -> None:
    pipe = redis.pipeline(transaction=True)  # one key: a MULTI is fine on Cluster too
    pipe.hset(key, mapping=fields)
    pipe.persist(key)  # kept while retained (docs/backends/redis.md#keys)
    await pipe.execute()


async def _move_member(redis: Any, zset: bytes, other: bytes, old: bytes, new: str) -> bool:
    """Move one member of `zset` from EMQX id `old` to hookbridge id `new`. True if the message
    is still there (False: its hash had expired, the member is dropped)."""
    old_hash, new_hash = keys.MESSAGE_PREFIX + old, keys.message(new)
    present = bool(await redis.exists(new_hash))
    if not present:
        fields = await redis.hgetall(old_hash)
        if fields:
            ttl = await redis.pttl(old_hash)
            fields[b"id"] = new.encode()
            pipe = redis.pipeline(transaction=True)  # one key: a MULTI is fine on Cluster too
            pipe.hset(new_hash, mapping=fields)
            if ttl > 0:
                pipe.pexpire(new_hash, ttl)
            await pipe.execute()
            present = True
    if present:
        await redis.zadd(zset, {new: keys.score(new)})
    if await redis.type(other) != b"zset" or await redis.zscore(other, old) is None:
        await redis.delete(old_hash)
    await redis.zrem(zset, old)
    return present


async def migrate_redis(redis: Any, dry_run: bool = False, cluster: bool = False) -> Counts:
    counts = Counts()
    found = await survey_redis(redis, counts.survey)
    counts.survey.refuse_unconvertible()  # before the first write
    # the topic index of the pool's kind (a cluster's has other names: keys.py)
    msg_index = keys.CLUSTER_MSG_INDEX if cluster else keys.MSG_INDEX
    retain_index = keys.CLUSTER_RETAIN_INDEX if cluster else keys.RETAIN_INDEX

    # Retained strings and hashes first: the sorted-set moves below look at the retained key of
    # each topic, which must be a sorted set by then.
    for key, (old, new) in found.strings.items():
        if dry_run:
            present = bool(await redis.exists(keys.MESSAGE_PREFIX + old) or await redis.exists(keys.message(new)))
        else:
            present = await _retained_string(redis, key, old, new, retain_index)
        if present:
            counts.retained += 1
        else:
            counts.gone += 1
            counts.gone_named.append(f"{keys.dec(key)} {keys.dec(old)}")
    for key, new in found.hashes.items():
        if not dry_run:
            await _retained_hash(redis, key, new, retain_index)
        counts.retained += 1

    for zset, members in found.sets.items():
        retained = zset.startswith(keys.RETAIN_PREFIX)
        prefix = keys.RETAIN_PREFIX if retained else keys.TOPIC_LIST_PREFIX
        topic = _topic_of(zset, prefix)
        other = (keys.TOPIC_LIST_PREFIX if retained else keys.RETAIN_PREFIX) + topic
        # Messages, not members: a run stopped mid-move left one message under both of its ids.
        before = len({new for _, _, new in members})
        gone = 0
        for member, score, new in members:
            if member == new.encode():
                # hookbridge's form already (EMQX's rule engine writes 32 hex), but maybe with EMQX's
                # constant score 1: the score is its publish time, or it sorts before everything.
                if score != keys.score(new):
                    counts.messages += not retained
                    if not dry_run:
                        await redis.zadd(zset, {member: keys.score(new)}, xx=True)
                continue
            if dry_run:
                present = bool(
                    await redis.exists(keys.MESSAGE_PREFIX + member) or await redis.exists(keys.message(new))
                )
            else:
                present = await _move_member(redis, zset, other, member, new)
            if not present:
                gone += 1
                counts.gone_named.append(f"{keys.dec(zset)} {keys.dec(member)}")
            elif retained:
                counts.retained += 1
            else:
                counts.messages += 1
        counts.gone += gone
        if dry_run:
            continue
        check_kept(keys.dec(zset), before - gone, await redis.zcard(zset))
        if await redis.exists(zset):
            await redis.zadd(retain_index if retained else msg_index, {topic: 0})  # docs/backends/redis.md
    for key, (value, new) in found.offsets.items():
        if value == new.encode():
            continue
        counts.offsets += 1
        if not dry_run:
            # Only if it still holds the EMQX id: a bridge that already moved it wins.
            await redis.eval(
                "if redis.call('GET', KEYS[1]) == ARGV[1] then"
                " redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL') end return 1",
                1,
                key,
                value,
                new,
            )
    return counts


async def migrate(pool: Any, dry_run: bool) -> list[str]:
    """`hookbridge migrate-emqx44 --pool redis.<pool>`: a connection of the pool's own settings."""
    from actions.redis.clients import redis_client

    client = redis_client(pool, max_connections=2)
    try:
        return (await migrate_redis(client, dry_run=dry_run, cluster=pool["type"] == "cluster")).lines(dry_run)
    finally:
        await client.aclose()
