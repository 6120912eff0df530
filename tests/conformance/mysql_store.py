"""The conformance suite's view of MySQL / MariaDB: pool config and read-back (see stores.py for the contract)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncmy

from actions.mysql import schema
from conformance.stores import START, Store, Stored
from support.services import start_mariadb, stop_mariadb

PORT = 3307  # its own server (scripts/mariadb.sh): the outage tests stop and restart it


class MysqlStore(Store):
    db = "mysql"

    def __init__(self, port: int) -> None:
        self.port = port

    @classmethod
    def serve(cls) -> int:
        start_mariadb(PORT)
        return PORT

    def pool_config(self) -> str:
        # `user`: EMQX 4's name for the login, accepted beside `username`.
        return (
            f"backend.mysql.pool1.server = 127.0.0.1:{self.port}\n"
            "backend.mysql.pool1.user = hookbridge\n"
            "backend.mysql.pool1.password = hookbridge\n"
            "backend.mysql.pool1.database = mqtt\n"
        )

    async def _connect(self) -> None:
        self.conn = await asyncmy.connect(
            host="127.0.0.1", port=self.port, user="hookbridge", password="hookbridge", db="mqtt", autocommit=True
        )

    async def open(self) -> None:
        await self._connect()
        await self.execute(f"DROP TABLE IF EXISTS {', '.join(schema.TABLES)}")
        for statement in schema.statements():  # applications write mqtt_sub before the bridge starts
            await self.execute(statement)

    async def close(self) -> None:
        self.conn.close()

    async def execute(self, sql: str, *args: Any) -> list[Any]:
        for attempt in range(60):
            try:
                async with self.conn.cursor() as cursor:
                    await cursor.execute(sql, args)
                    return list(await cursor.fetchall())
            except (asyncmy.errors.OperationalError, asyncmy.errors.InterfaceError, OSError):
                if attempt == 59:
                    raise
                await asyncio.sleep(0.5)  # the server was restarted (the outage tests)
                with contextlib.suppress(asyncmy.errors.OperationalError, OSError):
                    await self._connect()
        raise AssertionError("unreachable")

    async def client(self, clientid: str) -> dict[str, Any] | None:
        rows = await self.execute(
            "SELECT state, online_at, offline_at, node FROM mqtt_client WHERE clientid = %s", clientid
        )
        if not rows:
            return None
        state, online_at, offline_at, node = rows[0]
        return {"state": state, "online": online_at is not None, "offline": offline_at is not None, "node": node}

    async def messages(self, topic: str) -> list[Stored]:
        rows = await self.execute(
            "SELECT msgid, sender, topic, qos, payload, retain FROM mqtt_msg WHERE topic = %s ORDER BY msgid", topic
        )
        return [Stored(r[0], r[1], r[2], r[3], bytes(r[4]), bool(r[5])) for r in rows]

    async def live_payloads(self, topic: str) -> list[bytes]:
        rows = await self.execute(
            "SELECT payload FROM mqtt_msg WHERE topic = %s AND (expires_at IS NULL OR expires_at > UTC_TIMESTAMP(6)) "
            "ORDER BY msgid",
            topic,
        )
        return [bytes(r[0]) for r in rows]

    async def message_count(self) -> int:
        return int((await self.execute("SELECT count(*) FROM mqtt_msg"))[0][0])

    async def retained(self, topic: str) -> str | None:
        rows = await self.execute("SELECT msgid FROM mqtt_retain WHERE topic = %s", topic)
        return str(rows[0][0]) if rows else None

    async def offset(self, clientid: str, topic_filter: str) -> str | None:
        rows = await self.execute(
            "SELECT msgid FROM mqtt_acked WHERE clientid = %s AND topic = %s", clientid, topic_filter
        )
        if not rows:
            return None
        return START if rows[0][0] == "" else str(rows[0][0])

    async def set_offset_start(self, clientid: str, topic_filter: str) -> None:
        await self.execute("INSERT INTO mqtt_acked (clientid, topic, mid) VALUES (%s, %s, 0)", clientid, topic_filter)

    async def add_subscription(self, clientid: str, topic: str, qos: int) -> None:
        await self.execute("INSERT INTO mqtt_sub (clientid, topic, qos) VALUES (%s, %s, %s)", clientid, topic, qos)

    def stop_server(self) -> None:
        stop_mariadb(self.port)

    def start_server(self) -> None:
        start_mariadb(self.port)


STORE = MysqlStore
