"""PostgreSQL as the store of the embedded broker's users and ACL (`broker.auth.backend`,
`broker.acl.backend`), in EMQX 4's layout: tables `mqtt_user(username, password, salt,
is_superuser)` and `mqtt_acl(username, clientid, topic, access, allow)`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from bridge.plugin import AclEntry, PoolConfig, UserRecord, UserStoreDown, acl_row, settings_context, user_record


async def _open(pool: PoolConfig) -> Any:
    """A small asyncpg pool of the users' or the ACL's lookups."""
    host, port = pool["server"]
    return await asyncpg.create_pool(
        host=host,
        port=port,
        user=pool["username"] or None,
        password=pool["password"] or None,
        database=pool["database"],
        ssl=settings_context(pool.settings) or False,
        min_size=0,  # connect on first use: a server down at start does not stop the bridge
        max_size=4,
        timeout=pool["request_timeout"],
        command_timeout=pool["request_timeout"],
    )


class PgsqlUsers:
    QUERY = "SELECT password, salt, is_superuser FROM mqtt_user WHERE username = $1 LIMIT 1"

    def __init__(self, pool: PoolConfig) -> None:
        self._pool = pool
        self._conns: Any = None
        self.lookups = 0

    async def _connections(self) -> Any:
        if self._conns is None:
            self._conns = await _open(self._pool)
        return self._conns

    async def find(self, username: str) -> UserRecord | None:
        self.lookups += 1
        try:
            conns = await self._connections()
            row = await asyncio.wait_for(conns.fetchrow(self.QUERY, username), self._pool["request_timeout"])
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            raise UserStoreDown(str(exc) or type(exc).__name__) from None
        return None if row is None else user_record(row["password"], row["salt"], row["is_superuser"])

    async def close(self) -> None:
        if self._conns is not None:
            await self._conns.close()


class PgsqlAcl:
    per_client = True
    QUERY = "SELECT topic, access, allow FROM mqtt_acl WHERE username = $1 OR username = '$all' OR clientid = $2"

    def __init__(self, pool: PoolConfig) -> None:
        self.pool = pool
        self.conns: Any = None

    async def _connections(self) -> Any:
        if self.conns is None:
            self.conns = await _open(self.pool)
        return self.conns

    async def entries(self, username: str | None, clientid: str) -> list[AclEntry]:
        conns = await self._connections()
        records = await conns.fetch(self.QUERY, username, clientid)
        rows = (acl_row(r["topic"], r["access"], r["allow"]) for r in records)
        return [row for row in rows if row is not None]

    async def close(self) -> None:
        if self.conns is not None:
            await self.conns.close()
