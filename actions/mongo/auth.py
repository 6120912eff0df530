"""MongoDB as the store of the embedded broker's users and ACL (`broker.auth.backend`,
`broker.acl.backend`), in EMQX 4's layout: collections `mqtt_user` `{username, password, salt,
is_superuser}` and `mqtt_acl` (the PostgreSQL columns, or EMQX's `publish` / `subscribe` /
`pubsub` lists of filters).
"""

from __future__ import annotations

from typing import Any

from pymongo import AsyncMongoClient

from actions.mongo.client_settings import client_options
from bridge.plugin import (
    ACL_ALL_USERS,
    ACL_READ,
    ACL_READWRITE,
    ACL_WRITE,
    AclEntry,
    PoolConfig,
    UserRecord,
    UserStoreDown,
    acl_row,
    user_record,
)


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
            raise UserStoreDown(str(exc) or type(exc).__name__) from None
        return None if doc is None else user_record(doc.get("password"), doc.get("salt"), doc.get("is_superuser"))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


class MongoAcl:
    per_client = True

    def __init__(self, pool: PoolConfig) -> None:
        self.client: Any = AsyncMongoClient(**client_options(pool))
        self.collection = self.client[pool["database"]]["mqtt_acl"]

    async def entries(self, username: str | None, clientid: str) -> list[AclEntry]:
        who: list[dict[str, Any]] = [{"username": ACL_ALL_USERS}, {"clientid": clientid}]
        if username is not None:
            who.append({"username": username})
        found: list[AclEntry] = []
        async for doc in self.collection.find({"$or": who}):
            row = acl_row(doc.get("topic"), doc.get("access"), doc.get("allow", 1))
            if row is not None:
                found.append(row)
            for key, bits in (("subscribe", ACL_READ), ("publish", ACL_WRITE), ("pubsub", ACL_READWRITE)):
                topics = doc.get(key)
                for topic in topics if isinstance(topics, list) else ():
                    if isinstance(topic, str) and topic:
                        found.append(AclEntry(bits, topic, substitute=True))
        return found

    async def close(self) -> None:
        await self.client.close()
