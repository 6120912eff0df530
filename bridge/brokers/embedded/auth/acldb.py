"""`broker.acl.backend`: ACL entries held in a database, in EMQX 4's layouts (SPEC 6.2).

- Redis: `HGETALL mqtt_acl:<username>`; field = topic filter, value 1 subscribe, 2 publish,
  3 both (grants only).
- PostgreSQL: table `mqtt_acl(username, clientid, topic, access, allow)`; the rows whose
  `username` is the client's, or `$all` (every client), or whose `clientid` is the client's;
  `allow` 1 grants, 0 denies; `access` 1 subscribe, 2 publish, 3 both.
- MongoDB: collection `mqtt_acl` with the same fields, chosen the same way; a document may also
  carry EMQX's `publish` / `subscribe` / `pubsub` lists of filters (grants).

`%u` and `%c` levels are filled in per client, as EMQX does. EMQX's `ipaddr` column is not
read. Entries are read once per login and cached (ACL_CACHE_TTL, ACL_CACHE_SIZE), so a change
in the database reaches a client at its next login after that; a database that does not
answer refuses the login (AclBackendDown), it never lets a client in without its ACL.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any, Protocol

import asyncpg
from pymongo import AsyncMongoClient

from actions.mongo.backend import client_options
from actions.pgsql.backend import tls_context
from bridge.brokers.embedded.auth.acl import READ, READWRITE, WRITE, Entry
from bridge.brokers.embedded.auth.users import redis_client
from bridge.conf.config import PoolConfig

ACL_CACHE_TTL = 30.0  # seconds: how stale a database ACL may be (issue 15: at most 30 s)
ACL_CACHE_SIZE = 10_000  # entries (issue 15: at most 10,000)
ALL_USERS = "$all"  # EMQX: a row for every client
_ACCESS = {1: READ, 2: WRITE, 3: READWRITE}


class AclBackendDown(Exception):
    """The database holding the ACL did not answer: the login must be refused."""


class AclStore(Protocol):
    per_client: bool  # whether the rows depend on the client id too (else on the user name only)

    async def entries(self, username: str | None, clientid: str) -> list[Entry]: ...

    async def close(self) -> None: ...


def _access(value: Any) -> int | None:
    try:
        return _ACCESS.get(int(value))
    except (TypeError, ValueError):
        return None


def _row_entry(topic: Any, access: Any, allow: Any) -> Entry | None:
    bits = _access(access)
    if not isinstance(topic, str) or not topic or bits is None:
        return None  # a row the EMQX layout does not describe: it grants nothing
    return Entry(bits, topic, allow=_truthy(allow), substitute=True)


def _truthy(value: Any) -> bool:
    if isinstance(value, (bytes, str)):
        return value not in (b"0", "0", b"", "", "false", b"false")
    return bool(value)


class RedisAcl:
    per_client = False  # `mqtt_acl:<username>`: one read serves every client of a user

    def __init__(self, pool: PoolConfig) -> None:
        self.redis: Any = redis_client(pool)

    async def entries(self, username: str | None, clientid: str) -> list[Entry]:
        if username is None:
            return []  # EMQX keys the ACL by user name: an anonymous client has none
        found: dict[bytes, bytes] = await self.redis.hgetall(f"mqtt_acl:{username}")
        rows = (_row_entry(field.decode("utf-8", "replace"), value, 1) for field, value in found.items())
        return [row for row in rows if row is not None]

    async def close(self) -> None:
        await self.redis.aclose()


class PgsqlAcl:
    per_client = True
    QUERY = "SELECT topic, access, allow FROM mqtt_acl WHERE username = $1 OR username = '$all' OR clientid = $2"

    def __init__(self, pool: PoolConfig) -> None:
        self.pool = pool
        self.conns: Any = None

    async def _connections(self) -> Any:
        if self.conns is None:
            host, port = self.pool["server"]
            self.conns = await asyncpg.create_pool(
                host=host,
                port=port,
                user=self.pool["username"] or None,
                password=self.pool["password"] or None,
                database=self.pool["database"],
                ssl=tls_context(self.pool),
                min_size=0,
                max_size=4,
                timeout=self.pool["request_timeout"],
                command_timeout=self.pool["request_timeout"],
            )
        return self.conns

    async def entries(self, username: str | None, clientid: str) -> list[Entry]:
        conns = await self._connections()
        records = await conns.fetch(self.QUERY, username, clientid)
        rows = (_row_entry(r["topic"], r["access"], r["allow"]) for r in records)
        return [row for row in rows if row is not None]

    async def close(self) -> None:
        if self.conns is not None:
            await self.conns.close()


class MongoAcl:
    per_client = True

    def __init__(self, pool: PoolConfig) -> None:
        self.client: Any = AsyncMongoClient(**client_options(pool))
        self.collection = self.client[pool["database"]]["mqtt_acl"]

    async def entries(self, username: str | None, clientid: str) -> list[Entry]:
        who: list[dict[str, Any]] = [{"username": ALL_USERS}, {"clientid": clientid}]
        if username is not None:
            who.append({"username": username})
        found: list[Entry] = []
        async for doc in self.collection.find({"$or": who}):
            row = _row_entry(doc.get("topic"), doc.get("access"), doc.get("allow", 1))
            if row is not None:
                found.append(row)
            for key, bits in (("subscribe", READ), ("publish", WRITE), ("pubsub", READWRITE)):
                topics = doc.get(key)
                for topic in topics if isinstance(topics, list) else ():
                    if isinstance(topic, str) and topic:
                        found.append(Entry(bits, topic, substitute=True))
        return found

    async def close(self) -> None:
        await self.client.close()


STORES: dict[str, type[RedisAcl] | type[PgsqlAcl] | type[MongoAcl]] = {
    "redis": RedisAcl,
    "pgsql": PgsqlAcl,
    "mongo": MongoAcl,
}


class CachedAcl:
    """A store's entries per (user, client id), kept ACL_CACHE_TTL seconds, at most ACL_CACHE_SIZE."""

    def __init__(self, store: AclStore, timeout: float, ttl: float = ACL_CACHE_TTL, size: int = ACL_CACHE_SIZE) -> None:
        self.store, self.timeout, self.ttl, self.size = store, timeout, ttl, size
        self._cache: OrderedDict[tuple[str | None, str], tuple[float, list[Entry]]] = OrderedDict()
        self.lookups = 0  # reads that reached the database (a test counts them)

    async def entries(self, username: str | None, clientid: str) -> list[Entry]:
        key, now = (username, clientid if self.store.per_client else ""), time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        self.lookups += 1
        try:
            found = await asyncio.wait_for(self.store.entries(username, clientid), self.timeout)
        except Exception as exc:  # any failure refuses the login; never a client without its ACL
            raise AclBackendDown(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None
        self._cache[key] = (now + self.ttl, found)
        self._cache.move_to_end(key)
        while len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return found

    def clear(self) -> None:
        self._cache.clear()

    async def close(self) -> None:
        await self.store.close()
