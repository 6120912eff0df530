"""`broker.auth.backend`: users held in Redis, PostgreSQL or MongoDB, read as EMQX 4 read them.

- Redis: `HMGET mqtt_user:<username> password salt is_superuser`
- PostgreSQL: `SELECT password, salt, is_superuser FROM mqtt_user WHERE username = $1`
- MongoDB: the `mqtt_user` collection, `{username, password, salt, is_superuser}`

Each store has its own small client made from the pool's connection settings (not the rule
runner's: a login must not wait behind a batch of writes). Lookups are cached: a user read less
than CACHE_TTL ago is not read again, and CONNECTs of one user that arrive together share one
read. A store that does not answer raises BackendDown; nothing is cached then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg
import redis.asyncio as aioredis
from pymongo import AsyncMongoClient

from actions.mongo.backend import client_options
from actions.pgsql.backend import tls_context
from actions.redis.backend import tls_options
from bridge.conf.config import PoolConfig

log = logging.getLogger(__name__)

CACHE_TTL = 30.0  # seconds a looked-up user (or its absence) is trusted
CACHE_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class UserRecord:
    password: str  # the stored (hashed) password
    salt: str
    superuser: bool


class BackendDown(Exception):
    """The database holding the users did not answer (the login is refused, never let in)."""


class UserStore(Protocol):
    lookups: int  # reads sent to the database (the cache's effect shows here)

    async def find(self, username: str) -> UserRecord | None: ...

    async def close(self) -> None: ...


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _flag(value: Any) -> bool:
    """is_superuser as the databases hold it: 1 / true / "1" / "true"."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _record(password: Any, salt: Any, superuser: Any) -> UserRecord | None:
    if password is None:
        return None
    return UserRecord(_text(password), _text(salt), _flag(superuser))


def redis_client(pool: PoolConfig) -> Any:
    """A small Redis client of its own for a pool (users and ACL lookups, not the rule runner's)."""
    host, port = pool["server"]
    connections = aioredis.ConnectionPool(
        host=host,
        port=port,
        db=pool["database"],
        username=pool["username"] or None,
        password=pool["password"] or None,
        protocol=2,
        max_connections=4,
        socket_connect_timeout=pool["request_timeout"],
        socket_timeout=pool["request_timeout"],
        **tls_options(pool),
    )
    return aioredis.Redis(connection_pool=connections)


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
            raise BackendDown(str(exc) or type(exc).__name__) from None
        return _record(password, salt, superuser)

    async def close(self) -> None:
        await self._redis.aclose()


class PgsqlUsers:
    QUERY = "SELECT password, salt, is_superuser FROM mqtt_user WHERE username = $1 LIMIT 1"

    def __init__(self, pool: PoolConfig) -> None:
        self._pool = pool
        self._conns: Any = None
        self.lookups = 0

    async def _connections(self) -> Any:
        if self._conns is None:
            host, port = self._pool["server"]
            self._conns = await asyncpg.create_pool(
                host=host,
                port=port,
                user=self._pool["username"] or None,
                password=self._pool["password"] or None,
                database=self._pool["database"],
                ssl=tls_context(self._pool),
                min_size=0,  # connect on first use: a server down at start does not stop the bridge
                max_size=4,
                timeout=self._pool["request_timeout"],
                command_timeout=self._pool["request_timeout"],
            )
        return self._conns

    async def find(self, username: str) -> UserRecord | None:
        self.lookups += 1
        try:
            conns = await self._connections()
            row = await asyncio.wait_for(conns.fetchrow(self.QUERY, username), self._pool["request_timeout"])
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            raise BackendDown(str(exc) or type(exc).__name__) from None
        return None if row is None else _record(row["password"], row["salt"], row["is_superuser"])

    async def close(self) -> None:
        if self._conns is not None:
            await self._conns.close()


class MongoUsers:
    def __init__(self, pool: PoolConfig) -> None:
        self._pool = pool
        self._users: Any = None  # the client is made on first use, inside the running loop
        self._client: AsyncMongoClient[dict[str, Any]] | None = None
        self.lookups = 0

    def _collection(self) -> Any:
        if self._users is None:
            timeout_ms = int(self._pool["request_timeout"] * 1000)
            options = client_options(self._pool) | {
                "serverSelectionTimeoutMS": timeout_ms,
                "connectTimeoutMS": timeout_ms,
                "socketTimeoutMS": timeout_ms,
                "maxPoolSize": 4,
            }
            self._client = AsyncMongoClient(**options)
            self._users = self._client[self._pool["database"]]["mqtt_user"]
        return self._users

    async def find(self, username: str) -> UserRecord | None:
        self.lookups += 1
        try:
            doc = await self._collection().find_one(
                {"username": username}, {"_id": 0, "password": 1, "salt": 1, "is_superuser": 1}
            )
        except Exception as exc:  # pymongo's errors and the socket's: the store did not answer
            raise BackendDown(str(exc) or type(exc).__name__) from None
        return None if doc is None else _record(doc.get("password"), doc.get("salt"), doc.get("is_superuser"))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


STORES: dict[str, type[RedisUsers] | type[PgsqlUsers] | type[MongoUsers]] = {
    "redis": RedisUsers,
    "pgsql": PgsqlUsers,
    "mongo": MongoUsers,
}


def open_store(pool: PoolConfig) -> UserStore:
    return STORES[pool.db](pool)


class CachedUsers:
    """A store behind a cache of at most `entries` users, each trusted for `ttl` seconds."""

    def __init__(self, store: UserStore, ttl: float = CACHE_TTL, entries: int = CACHE_ENTRIES) -> None:
        self.store = store
        self._ttl = ttl
        self._entries = entries
        self._cache: OrderedDict[str, tuple[float, UserRecord | None]] = OrderedDict()
        self._pending: dict[str, asyncio.Future[UserRecord | None]] = {}

    async def find(self, username: str) -> UserRecord | None:
        hit = self._cache.get(username)
        if hit is not None and hit[0] > time.monotonic():
            self._cache.move_to_end(username)
            return hit[1]
        pending = self._pending.get(username)
        if pending is not None:  # the same user's CONNECTs arriving together: one read
            return await asyncio.shield(pending)
        future: asyncio.Future[UserRecord | None] = asyncio.get_running_loop().create_future()
        self._pending[username] = future
        try:
            record = await self.store.find(username)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # read here: waiters get it; an unwaited one must not warn
            raise
        else:
            future.set_result(record)
            self._remember(username, record)
            return record
        finally:
            del self._pending[username]

    def _remember(self, username: str, record: UserRecord | None) -> None:
        self._cache[username] = (time.monotonic() + self._ttl, record)
        self._cache.move_to_end(username)
        while len(self._cache) > self._entries:
            self._cache.popitem(last=False)

    def clear(self) -> None:
        self._cache.clear()

    async def close(self) -> None:
        await self.store.close()
