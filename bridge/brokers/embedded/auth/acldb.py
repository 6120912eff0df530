"""`broker.acl.backend`: ACL entries held in a database, in EMQX 4's layouts
(docs/security.md#4-who-may-publish-and-subscribe-acl-file-database-acls).

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
answer refuses the login (AclBackendDown), it never lets a client in without its ACL. Each store
is its backend's (`acl` in its plug-in declaration: actions/<db>/auth.py).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Protocol

from bridge.accounts import Entry
from bridge.conf import registry
from bridge.conf.config import PoolConfig
from bridge.errors import HookbridgeError

ACL_CACHE_TTL = 30.0  # seconds: how stale a database ACL may be (docs/security.md: at most 30 s)
ACL_CACHE_SIZE = 10_000  # entries (docs/security.md: at most 10,000)


class AclBackendDown(HookbridgeError):
    """The database holding the ACL did not answer: the login must be refused."""


class AclStore(Protocol):
    per_client: bool  # whether the rows depend on the client id too (else on the user name only)

    async def entries(self, username: str | None, clientid: str) -> list[Entry]: ...

    async def close(self) -> None: ...


def open_acl_store(pool: PoolConfig) -> AclStore:
    """The ACL store of the pool's backend (its plug-in's `acl`), made from the pool's settings."""
    store: AclStore = registry.backends()[pool.db].acl_store()(pool)
    return store


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
