"""Bring the Redis data EMQX 4.4 Enterprise wrote into hookbridge's layout (`hookbridge migrate-emqx44`,
through `RedisBackend.emqx44_migration`).

The keys of seed 003 are the same in both (docs/migrate-from-emqx44.md#data-in-place); what
differs is the message id. EMQX 4.4 writes `emqx_guid` ids in base62 (`2VFt0kuNrOktefX6m4nP`),
hookbridge the same 128-bit value in 32 hex digits, whose string order is time order (the fetch,
the offsets and the scores rely on it). The base62 text decodes to exactly that value (64-bit
microsecond timestamp, 48-bit node/process, 16-bit sequence), so every EMQX id maps to one
hookbridge id that sorts where the message was published: EMQX's stored messages come before the
ones hookbridge stores after the switch, in one queue.

Walked: every `mqtt:msg:<topic>` and `mqtt:retain:<topic>` sorted set (their EMQX members and the
`mqtt:msg:<id>` hashes they name) and every `mqtt:acked:<clientid>:<filter>` offset. Each member
is moved in steps that can each be repeated (copy the hash to its new id, add the new member,
drop the old hash unless the other sorted set of the topic still names it, remove the old
member), so a run stopped anywhere is finished by running it again, and a second run finds
nothing to do. No step touches two keys at once, so it runs on Redis Cluster too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actions.redis import keys
from bridge.msgid import HEX_ID, hookbridge_id


@dataclass
class Counts:
    messages: int = 0  # sorted-set members given a hookbridge id
    retained: int = 0
    gone: int = 0  # members whose hash had expired: dropped, as a fetch would
    offsets: int = 0
    unknown: list[str] = field(default_factory=list)  # members that are neither id form

    def lines(self, dry_run: bool) -> list[str]:
        verb = "would move" if dry_run else "moved"
        out = [
            f"{verb} {self.messages} stored message ids, {self.retained} retained message ids, "
            f"{self.offsets} pubsub offsets; {self.gone} ids of expired messages "
            f"{'would be ' if dry_run else ''}dropped"
        ]
        out += [f"left as is (not an EMQX 4.4 or hookbridge id): {item}" for item in self.unknown[:20]]
        return out


async def _scan(redis: Any, pattern: bytes, kind: str) -> list[bytes]:
    found: list[bytes] = []
    async for key in redis.scan_iter(match=pattern, count=1000, _type=kind):
        found.append(key)
    return found


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
    if await redis.zscore(other, old) is None:
        await redis.delete(old_hash)
    await redis.zrem(zset, old)
    return present


async def migrate_redis(redis: Any, dry_run: bool = False, cluster: bool = False) -> Counts:
    counts = Counts()
    # the topic index of the pool's kind (a cluster's has other names: keys.py)
    msg_index = keys.CLUSTER_MSG_INDEX if cluster else keys.MSG_INDEX
    retain_index = keys.CLUSTER_RETAIN_INDEX if cluster else keys.RETAIN_INDEX
    sets = [
        (key, keys.RETAIN_PREFIX + key[len(keys.TOPIC_LIST_PREFIX) :], False, msg_index)
        for key in await _scan(redis, keys.TOPIC_LIST_PREFIX + b"*", "zset")
    ]
    sets += [
        (key, keys.TOPIC_LIST_PREFIX + key[len(keys.RETAIN_PREFIX) :], True, retain_index)
        for key in await _scan(redis, keys.RETAIN_PREFIX + b"*", "zset")
    ]
    for zset, other, retained, index in sets:
        topic = zset[len(keys.RETAIN_PREFIX if retained else keys.TOPIC_LIST_PREFIX) :]
        for member in await redis.zrange(zset, 0, -1):
            new = hookbridge_id(member)
            if new is None:
                if not HEX_ID.fullmatch(member):
                    counts.unknown.append(f"{keys.dec(zset)} {keys.dec(member)}")
                continue
            if dry_run:
                present = bool(
                    await redis.exists(keys.MESSAGE_PREFIX + member) or await redis.exists(keys.message(new))
                )
            else:
                present = await _move_member(redis, zset, other, member, new)
            if not present:
                counts.gone += 1
            elif retained:
                counts.retained += 1
            else:
                counts.messages += 1
        if not dry_run and await redis.exists(zset):
            await redis.zadd(index, {topic: 0})  # the topic index (docs/backends/redis.md) has it
    for key in await _scan(redis, b"mqtt:acked:*", "string"):
        value = await redis.get(key)
        new = hookbridge_id(value) if value and value != b"0" else None
        if new is None:
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
    from actions.redis.connection import redis_client

    client = redis_client(pool, max_connections=2)
    try:
        return (await migrate_redis(client, dry_run=dry_run, cluster=pool["type"] == "cluster")).lines(dry_run)
    finally:
        await client.aclose()
