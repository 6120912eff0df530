"""What each backend supplies to the conformance suite: its pool config and how to read its data back.

The suite runs the same rules (`rules_for(db)`) and the same assertions on every backend;
a store only translates "what is stored" into plain Python values.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from pymongo import AsyncMongoClient

from support.services import (
    postgres_dsn,
    start_ferretdb,
    start_postgres,
    start_redis,
    stop_ferretdb,
    stop_postgres,
    stop_redis,
)

START = "start"  # an offset "before everything"


@dataclass(frozen=True)
class Stored:
    msgid: str
    sender: str
    topic: str
    qos: int
    payload: bytes
    retain: bool


class Store(abc.ABC):
    db: str
    port: int

    @abc.abstractmethod
    def pool_config(self) -> str: ...

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect and empty the database (a fresh one per test)."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def client(self, clientid: str) -> dict[str, Any] | None:
        """{"state": 0|1, "online": bool(online_at set), "offline": bool(offline_at set), "node": str}"""

    @abc.abstractmethod
    async def messages(self, topic: str) -> list[Stored]:
        """The topic's stored messages in stored (fetch) order."""

    @abc.abstractmethod
    async def message_count(self) -> int: ...

    @abc.abstractmethod
    async def retained(self, topic: str) -> str | None:
        """The msgid of the topic's retained message."""

    @abc.abstractmethod
    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        """The last acked msgid of a pubsub subscription, START, or None when there is none."""

    @abc.abstractmethod
    async def set_offset_start(self, clientid: str, topic_filter: str) -> None: ...

    @abc.abstractmethod
    async def add_subscription(self, clientid: str, topic: str, qos: int) -> None:
        """What an application does to give a client a proxy subscription."""

    @abc.abstractmethod
    def stop_server(self) -> None: ...

    @abc.abstractmethod
    def start_server(self) -> None: ...


class RedisStore(Store):
    db = "redis"

    def __init__(self, port: int) -> None:
        self.port = port

    def pool_config(self) -> str:
        return f"backend.redis.pool1.server = 127.0.0.1:{self.port}\n"

    async def open(self) -> None:
        self.redis = aioredis.Redis(port=self.port, protocol=2)
        await self.redis.flushall()

    async def close(self) -> None:
        await self.redis.aclose()

    async def client(self, clientid: str) -> dict[str, Any] | None:
        fields = await self.redis.hgetall(f"mqtt:client:{clientid}")
        if not fields:
            return None
        return {
            "state": int(fields[b"state"]),
            "online": fields.get(b"online_at", b"undefined") != b"undefined",
            "offline": fields.get(b"offline_at", b"undefined") != b"undefined",
            "node": fields[b"node"].decode(),
        }

    async def messages(self, topic: str) -> list[Stored]:
        ids = await self.redis.zrange(f"mqtt:msg:{topic}".encode(), 0, -1)
        pipe = self.redis.pipeline()
        for msgid in ids:
            pipe.hgetall(b"mqtt:msg:" + msgid)
        return [
            Stored(
                f[b"id"].decode(),
                f[b"from"].decode(),
                f[b"topic"].decode(),
                int(f[b"qos"]),
                f[b"payload"],
                f[b"retain"] == b"true",
            )
            for f in await pipe.execute()
            if f
        ]

    async def message_count(self) -> int:
        count = 0
        async for key in self.redis.scan_iter(match=b"mqtt:msg:*", _type="zset"):
            count += await self.redis.zcard(key)
        return count

    async def retained(self, topic: str) -> str | None:
        ids = await self.redis.zrange(f"mqtt:retain:{topic}".encode(), 0, -1)
        return ids[0].decode() if ids else None

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        value = await self.redis.get(f"mqtt:acked:{clientid}:{topic_filter}".encode())
        if value is None:
            return None
        return START if value == b"0" else value.decode()

    async def set_offset_start(self, clientid: str, topic_filter: str) -> None:
        await self.redis.set(f"mqtt:acked:{clientid}:{topic_filter}".encode(), "0")

    async def add_subscription(self, clientid: str, topic: str, qos: int) -> None:
        await self.redis.hset(f"mqtt:sub:{clientid}".encode(), topic.encode(), qos)

    def stop_server(self) -> None:
        stop_redis(self.port)

    def start_server(self) -> None:
        start_redis(self.port, "--appendonly", "yes", "--appendfsync", "always")


class PgsqlStore(Store):
    db = "pgsql"

    def __init__(self, port: int) -> None:
        self.port = port

    def pool_config(self) -> str:
        return (
            f"backend.pgsql.pool1.server = 127.0.0.1:{self.port}\n"
            "backend.pgsql.pool1.username = hookbridge\n"
            "backend.pgsql.pool1.password = hookbridge\n"
            "backend.pgsql.pool1.database = mqtt\n"
        )

    async def open(self) -> None:
        self.conn = await asyncpg.connect(postgres_dsn(self.port))
        await self.conn.execute(
            "DROP TABLE IF EXISTS mqtt_client, mqtt_sub, mqtt_msg, mqtt_topic, mqtt_retain, mqtt_acked, mqtt_event_log"
        )
        from actions.pgsql.schema import SCHEMA

        for statement in SCHEMA:  # applications write mqtt_sub before the bridge starts
            await self.conn.execute(statement)

    async def close(self) -> None:
        await self.conn.close()

    async def _fetch(self, query: str, *args: Any) -> list[Any]:
        try:
            return list(await self.conn.fetch(query, *args))
        except (asyncpg.InterfaceError, asyncpg.PostgresConnectionError, OSError):
            self.conn = await asyncpg.connect(postgres_dsn(self.port))  # the server was restarted
            return list(await self.conn.fetch(query, *args))

    async def client(self, clientid: str) -> dict[str, Any] | None:
        rows = await self._fetch(
            "SELECT state, online_at, offline_at, node FROM mqtt_client WHERE clientid = $1", clientid
        )
        if not rows:
            return None
        row = rows[0]
        return {
            "state": row["state"],
            "online": row["online_at"] is not None,
            "offline": row["offline_at"] is not None,
            "node": row["node"],
        }

    async def messages(self, topic: str) -> list[Stored]:
        rows = await self._fetch(
            "SELECT msgid, sender, topic, qos, payload, retain FROM mqtt_msg WHERE topic = $1 ORDER BY msgid", topic
        )
        return [Stored(r["msgid"], r["sender"], r["topic"], r["qos"], bytes(r["payload"]), r["retain"]) for r in rows]

    async def message_count(self) -> int:
        return int((await self._fetch("SELECT count(*) AS n FROM mqtt_msg"))[0]["n"])

    async def retained(self, topic: str) -> str | None:
        rows = await self._fetch("SELECT msgid FROM mqtt_retain WHERE topic = $1", topic)
        return rows[0]["msgid"] if rows else None

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        rows = await self._fetch(
            "SELECT msgid FROM mqtt_acked WHERE clientid = $1 AND topic = $2", clientid, topic_filter
        )
        if not rows:
            return None
        return START if rows[0]["msgid"] == "" else str(rows[0]["msgid"])

    async def set_offset_start(self, clientid: str, topic_filter: str) -> None:
        await self.conn.execute(
            "INSERT INTO mqtt_acked (clientid, topic, mid) VALUES ($1, $2, 0)", clientid, topic_filter
        )

    async def add_subscription(self, clientid: str, topic: str, qos: int) -> None:
        await self.conn.execute("INSERT INTO mqtt_sub (clientid, topic, qos) VALUES ($1, $2, $3)", clientid, topic, qos)

    def stop_server(self) -> None:
        stop_postgres(self.port)

    def start_server(self) -> None:
        start_postgres(self.port)


class MongoStore(Store):
    db = "mongo"

    def __init__(self, port: int) -> None:
        self.port = port

    def pool_config(self) -> str:
        return f"backend.mongo.pool1.server = 127.0.0.1:{self.port}\nbackend.mongo.pool1.database = mqtt\n"

    async def open(self) -> None:
        # A short server selection timeout: reads during the outage test retry instead of hanging.
        self.connection: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            f"mongodb://127.0.0.1:{self.port}/?directConnection=true", serverSelectionTimeoutMS=20000
        )
        self.mongo = self.connection.mqtt
        await self.connection.drop_database("mqtt")

    async def close(self) -> None:
        await self.connection.close()

    async def client(self, clientid: str) -> dict[str, Any] | None:
        doc = await self.mongo.mqtt_client.find_one({"clientid": clientid})
        if doc is None:
            return None
        return {
            "state": doc["state"],
            "online": doc.get("online_at") is not None,
            "offline": doc.get("offline_at") is not None,
            "node": doc["node"],
        }

    async def messages(self, topic: str) -> list[Stored]:
        cursor = self.mongo.mqtt_msg.find({"topic": topic}).sort([("seq", 1), ("_id", 1)])
        return [
            Stored(d["msgid"], d["sender"], d["topic"], d["qos"], d.get("payload_raw", d["payload"]), d["retain"])
            async for d in cursor
        ]

    async def message_count(self) -> int:
        return int(await self.mongo.mqtt_msg.count_documents({}))

    async def retained(self, topic: str) -> str | None:
        doc = await self.mongo.mqtt_retain.find_one({"topic": topic})
        return doc["msgid"] if doc else None

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        doc = await self.mongo.mqtt_acked.find_one({"clientid": clientid, "topic": topic_filter})
        if doc is None:
            return None
        return START if doc["msgid"] == "" else str(doc["msgid"])

    async def set_offset_start(self, clientid: str, topic_filter: str) -> None:
        await self.mongo.mqtt_acked.insert_one({"clientid": clientid, "topic": topic_filter, "msgid": "", "mid": 0})

    async def add_subscription(self, clientid: str, topic: str, qos: int) -> None:
        await self.mongo.mqtt_sub.insert_one({"clientid": clientid, "topic": topic, "qos": qos})

    def stop_server(self) -> None:
        stop_ferretdb(self.port)

    def start_server(self) -> None:
        start_ferretdb(self.port)


def rules_for(
    db: str, extra: str = "", max_returned_count: int = 100, expired_time: int | None = None, time_range: str = ""
) -> str:
    """The same rule set on any backend: every function of SPEC 5."""
    expiry = f', "expired_time": {expired_time}' if expired_time else ""
    window = f', "time_range": "{time_range}"' if time_range else ""
    lines = [
        ("client.connected.1", "", "on_client_connected", ""),
        ("client.connected.2", "", "on_subscribe_lookup", ""),
        ("client.disconnected.1", "", "on_client_disconnected", ""),
        ("message.publish.1", "#", "on_message_publish", expiry),
        ("message.publish.2", "#", "on_message_retain", ""),
        ("message.publish.3", "#", "on_retain_delete", ""),
        (
            "session.subscribed.1",
            "queue/#",
            "on_message_fetch_for_queue",
            f', "offline_opts": {{"max_returned_count": {max_returned_count}{window}}}',
        ),
        (
            "session.subscribed.2",
            "pubsub/#",
            "on_message_fetch",
            f', "offline_opts": {{"max_returned_count": {max_returned_count}{window}}}',
        ),
        ("session.subscribed.3", "#", "on_retain_lookup", ""),
        ("message.acked.1", "queue/#", "on_message_acked_for_queue", ""),
        ("message.acked.2", "pubsub/#", "on_message_acked", ""),
        ("session.unsubscribed.1", "pubsub/#", "on_acked_delete", ""),
    ]
    text = ""
    for hook, topic, function, options in lines:
        topic_json = f'"topic": "{topic}", ' if topic else ""
        text += f'backend.{db}.hook.{hook} = {{{topic_json}"action": {{"function": "{function}"}}{options}}}\n'
    return text + extra
