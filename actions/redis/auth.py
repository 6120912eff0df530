"""Redis as the store of the embedded broker's users and ACL (`broker.auth.backend`,
`broker.acl.backend`), in EMQX 4's layout: `HMGET mqtt_user:<username> password salt is_superuser`,
`HGETALL mqtt_acl:<username>` (field = topic filter, value 1 subscribe, 2 publish, 3 both).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from actions.redis import clients
from bridge.plugin import AclEntry, PoolConfig, UserRecord, UserStoreDown, acl_row, user_record


def redis_client(pool: PoolConfig) -> Any:
    """A small Redis client of its own for a pool (users and ACL lookups, not the rule runner's):
    each lookup reads one key, so a cluster pool routes it to that key's master."""
    return clients.redis_client(pool, max_connections=4)


class RedisUsers:
    def __init__(self, pool: PoolConfig) -> None:
        self.lookups = 0
        self._redis: Any = redis_client(pool)

    async def find(self, username: str) -> UserRecord | None:
        self.lookups += 1
        try:
            password, salt, superuser = await self._redis.hmget(
                f"mqtt_user:{username}", "password", "salt", "is_superuser"
            )
        except (aioredis.RedisError, OSError) as exc:
            raise UserStoreDown(str(exc) or type(exc).__name__) from None
        return user_record(password, salt, superuser)

    async def close(self) -> None:
        await self._redis.aclose()


class RedisAcl:
    per_client = False  # `mqtt_acl:<username>`: one read serves every client of a user

    def __init__(self, pool: PoolConfig) -> None:
        self.redis: Any = redis_client(pool)

    async def entries(self, username: str | None, clientid: str) -> list[AclEntry]:
        if username is None:
            return []  # EMQX keys the ACL by user name: an anonymous client has none
        found: dict[bytes, bytes] = await self.redis.hgetall(f"mqtt_acl:{username}")
        rows = (acl_row(field.decode("utf-8", "replace"), value, 1) for field, value in found.items())
        return [row for row in rows if row is not None]

    async def close(self) -> None:
        await self.redis.aclose()
