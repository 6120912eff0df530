"""`broker.auth.backend`: users held in Redis, PostgreSQL or MongoDB, read as EMQX 4 read them.

- Redis: `HMGET mqtt_user:<username> password salt is_superuser`
- PostgreSQL: `SELECT password, salt, is_superuser FROM mqtt_user WHERE username = $1`
- MongoDB: the `mqtt_user` collection, `{username, password, salt, is_superuser}`

Each store is its backend's (`users` in its plug-in declaration: actions/<db>/auth.py), with its
own small client made from the pool's connection settings (not the rule runner's: a login must
not wait behind a batch of writes). Lookups are cached: a user read less
than CACHE_TTL ago is not read again, and CONNECTs of one user that arrive together share one
read. A store that does not answer raises BackendDown; nothing is cached then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Protocol

from bridge.accounts import UserRecord
from bridge.conf import registry
from bridge.conf.config import PoolConfig

log = logging.getLogger(__name__)

CACHE_TTL = 30.0  # seconds a looked-up user (or its absence) is trusted
CACHE_ENTRIES = 10_000


class UserStore(Protocol):
    lookups: int  # reads sent to the database (the cache's effect shows here)

    async def find(self, username: str) -> UserRecord | None: ...

    async def close(self) -> None: ...


def open_store(pool: PoolConfig) -> UserStore:
    """The user store of the pool's backend (its plug-in's `users`), made from the pool's settings."""
    store: UserStore = registry.backends()[pool.db].users_store()(pool)
    return store


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
