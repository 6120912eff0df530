"""The conformance suite's view of Cassandra: pool config and read-back (see stores.py for the contract)."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster
from cassandra.policies import ConstantReconnectionPolicy, DCAwareRoundRobinPolicy

from actions.cassa import schema
from actions.cassa.session import RECOVERABLE, AsyncSession
from conformance.stores import START, Store, Stored
from support.services import start_cassandra, stop_cassandra

PORT = 9042  # scripts/test.sh starts this node in the background before pytest
KEYSPACE = "mqtt_test"
REPLICATION = {"class": "SimpleStrategy", "replication_factor": 1}


class CassaStore(Store):
    db = "cassa"

    def __init__(self, port: int) -> None:
        self.port = port

    @classmethod
    def serve(cls) -> int:
        start_cassandra(PORT)  # waits for the node scripts/test.sh started, or starts one
        return PORT

    def pool_config(self) -> str:
        return (
            f"backend.cassa.pool1.nodes = 127.0.0.1:{self.port}\n"
            f"backend.cassa.pool1.keyspace = {KEYSPACE}\n"
            "backend.cassa.pool1.username = hookbridge\n"
            "backend.cassa.pool1.password = hookbridge\n"
            "backend.cassa.pool1.consistency = ONE\n"
            "backend.cassa.pool1.batch_time = 1ms\n"
        )

    async def open(self) -> None:
        await self.connect()
        for statement in schema.statements(KEYSPACE, REPLICATION):  # applications write `sub` before the bridge
            await self.cql.execute(statement)
        await self.truncate()

    async def connect(self) -> None:
        """Connect only (open() also empties the tables)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            self.cluster = Cluster(
                ["127.0.0.1"],
                port=self.port,
                auth_provider=PlainTextAuthProvider("hookbridge", "hookbridge"),
                protocol_version=5,
                load_balancing_policy=DCAwareRoundRobinPolicy(local_dc="datacenter1"),
                reconnection_policy=ConstantReconnectionPolicy(0.5, max_attempts=None),
            )
        self.cql = AsyncSession(await asyncio.to_thread(self.cluster.connect))

    async def truncate(self) -> None:
        tables = ("client", "sub", "msg", "msg_bucket", "topic", "retain", "acked", "event_log")
        await asyncio.gather(*(self.cql.execute(f"TRUNCATE {KEYSPACE}.{table}") for table in tables))

    async def close(self) -> None:
        await asyncio.to_thread(self.cluster.shutdown)

    async def rows(self, query: str, *args: Any) -> list[Any]:
        for _ in range(60):  # the node may be restarting (the outage test)
            try:
                return await self.cql.execute(query.format(ks=KEYSPACE), args)
            except RECOVERABLE:
                await asyncio.sleep(0.5)
        return await self.cql.execute(query.format(ks=KEYSPACE), args)

    async def client(self, clientid: str) -> dict[str, Any] | None:
        rows = await self.rows(
            "SELECT state, online_at, offline_at, node FROM {ks}.client WHERE clientid = %s", clientid
        )
        if not rows:
            return None
        state, online_at, offline_at, node = rows[0]
        return {"state": state, "online": online_at is not None, "offline": offline_at is not None, "node": node}

    async def messages(self, topic: str) -> list[Stored]:
        out = []
        for (bucket,) in await self.rows("SELECT bucket FROM {ks}.msg_bucket WHERE topic = %s", topic):
            rows = await self.rows(
                "SELECT msgid, sender, topic, qos, payload, retain FROM {ks}.msg WHERE topic = %s AND bucket = %s",
                topic,
                bucket,
            )
            out += [Stored(r[0], r[1], r[2], r[3], bytes(r[4] or b""), r[5]) for r in rows]
        return out

    async def live_payloads(self, topic: str) -> list[bytes]:
        return [m.payload for m in await self.messages(topic)]  # an expired row is gone (its TTL)

    async def message_count(self) -> int:
        return int((await self.rows("SELECT count(*) FROM {ks}.msg"))[0][0])

    async def retained(self, topic: str) -> str | None:
        rows = await self.rows("SELECT msgid FROM {ks}.retain WHERE topic = %s", topic)
        return str(rows[0][0]) if rows else None

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        rows = await self.rows(
            "SELECT msgid FROM {ks}.acked WHERE clientid = %s AND topic = %s", clientid, topic_filter
        )
        if not rows:
            return None
        return START if rows[0][0] == "" else str(rows[0][0])

    async def set_offset_start(self, clientid: str, topic_filter: str) -> None:
        await self.rows("INSERT INTO {ks}.acked (clientid, topic, msgid) VALUES (%s, %s, '')", clientid, topic_filter)

    async def add_subscription(self, clientid: str, topic: str, qos: int) -> None:
        await self.rows("INSERT INTO {ks}.sub (clientid, topic, qos) VALUES (%s, %s, %s)", clientid, topic, qos)

    def stop_server(self) -> None:
        stop_cassandra(self.port)

    def start_server(self) -> None:
        start_cassandra(self.port)


STORE = CassaStore
