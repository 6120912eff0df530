"""The conformance suite's view of MongoDB (FerretDB): pool config and read-back (see stores.py for the contract)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pymongo import AsyncMongoClient

from conformance.stores import START, Store, Stored
from support.services import start_ferretdb, stop_ferretdb

PORT = 27018  # FerretDB (no MongoDB server is packaged anywhere this machine reaches)


class MongoStore(Store):
    db = "mongo"

    def __init__(self, port: int) -> None:
        self.port = port

    @classmethod
    def serve(cls) -> int:
        start_ferretdb(PORT)
        return PORT

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

    async def live_payloads(self, topic: str) -> list[bytes]:
        now = dt.datetime.now(dt.UTC)
        query = {"topic": topic, "$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}]}
        cursor = self.mongo.mqtt_msg.find(query).sort([("seq", 1), ("_id", 1)])
        return [d.get("payload_raw", d["payload"]) async for d in cursor]

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


STORE = MongoStore
