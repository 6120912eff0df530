"""Pubsub offsets on a Redis Cluster: the single-node scripts OFFSET_GET / OFFSET_CREATE read the
owners hash and the offset key in one script, which a cluster refuses (other slots). Here the owner
is claimed first (`HSETNX`, on the owners hash alone), then the offset is read or created on its
own key, so a client only ever reads or creates an offset it owns. Plain keys (no `:` in the
client id or the filter, nearly all) need no owner and are one command, as on a single server.
"""

from __future__ import annotations

from typing import Any

from actions.redis import keys


async def _owns(redis: Any, key: bytes, clientid: bytes, claim: bool) -> bool:
    """Whether `clientid` owns the ambiguous offset `key`; claims it when no one does and `claim`."""
    owner = await redis.hget(keys.ACKED_OWNER, key)
    if owner is None and claim:
        await redis.hsetnx(keys.ACKED_OWNER, key, clientid)  # two claiming at once: the first wins
        owner = await redis.hget(keys.ACKED_OWNER, key)
    return owner is None or owner == clientid


async def get(redis: Any, key: bytes, clientid: bytes, ambiguous: bool) -> bytes | None:
    """The offset (None: none yet, or another client's). An offset written before owners were
    recorded is claimed by the first client that reads it, as on a single server."""
    if ambiguous and not await _owns(redis, key, clientid, claim=bool(await redis.exists(key))):
        return None
    found: bytes | None = await redis.get(key)
    return found


async def create(redis: Any, key: bytes, clientid: bytes, ambiguous: bool, first: str) -> bool:
    """Create the offset at `first` unless it exists; False when the key is another client's."""
    if ambiguous and not await _owns(redis, key, clientid, claim=True):
        return False
    await redis.set(key, first, nx=True)
    return True
