"""The conformance suite's view of PostgreSQL: pool config and read-back (see stores.py for the contract)."""

from __future__ import annotations

from typing import Any

import asyncpg

from conformance.stores import START, Store, Stored
from support.services import postgres_dsn, start_postgres, stop_postgres

PORT = 5439


class PgsqlStore(Store):
    db = "pgsql"

    def __init__(self, port: int) -> None:
        self.port = port

    @classmethod
    def serve(cls) -> int:
        start_postgres(PORT)
        return PORT

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

    async def live_payloads(self, topic: str) -> list[bytes]:
        rows = await self._fetch(
            "SELECT payload FROM mqtt_msg WHERE topic = $1 AND (expires_at IS NULL OR expires_at > now()) ORDER BY msgid",
            topic,
        )
        return [bytes(r["payload"]) for r in rows]

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


STORE = PgsqlStore
