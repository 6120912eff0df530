"""The conformance suite's view of Redis: pool config and read-back (see stores.py for the contract)."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from conformance.stores import START, Store, Stored
from support.services import start_redis, stop_redis

PORT = 6395  # its own server: the outage tests stop and restart it


class RedisStore(Store):
    db = "redis"

    def __init__(self, port: int) -> None:
        self.port = port

    @classmethod
    def serve(cls) -> int:
        # Restarted, not reused: the outage test stops and starts it, and must find its data again in
        # this checkout's .run/ (a server some other checkout started keeps its files elsewhere).
        stop_redis(PORT)
        start_redis(PORT, "--appendonly", "yes", "--appendfsync", "always")
        return PORT

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

    async def live_payloads(self, topic: str) -> list[bytes]:
        ids = await self.redis.zrange(f"mqtt:msg:{topic}".encode(), 0, -1)
        pipe = self.redis.pipeline()
        for msgid in ids:
            pipe.hget(b"mqtt:msg:" + msgid, "payload")
        return [payload for payload in await pipe.execute() if payload is not None]  # expired: the hash is gone

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


STORE = RedisStore
