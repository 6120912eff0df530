"""The four databases the reports read, each with a database / keyspace of its own (`spark_test`), so
nothing another test uses is ever dropped; and a count of event-log rows, to wait on."""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import dataclass

import asyncmy
import asyncpg
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster
from pymongo import MongoClient

from support.services import ROOT, postgres_dsn, start_cassandra, start_ferretdb, start_postgres

PG_PORT = 5439
MONGO_PORT = 27018
CASSA_PORT = 9042
MYSQL_PORT = 3307
NAME = "spark_test"


@dataclass(frozen=True)
class TestSource:
    pool_id: str
    pools: str  # config lines

    @property
    def db(self) -> str:
        return self.pool_id.split(".")[0]


PGSQL = TestSource(
    "pgsql.pool1",
    f"backend.pgsql.pool1.server = 127.0.0.1:{PG_PORT}\nbackend.pgsql.pool1.username = hookbridge\n"
    f"backend.pgsql.pool1.password = hookbridge\nbackend.pgsql.pool1.database = {NAME}\n"
    "backend.pgsql.pool1.batch_time = 1ms\n",
)
MONGO = TestSource(
    "mongo.pool1",
    f"backend.mongo.pool1.server = 127.0.0.1:{MONGO_PORT}\nbackend.mongo.pool1.database = {NAME}\n"
    "backend.mongo.pool1.batch_time = 1ms\n",
)
CASSA = TestSource(
    "cassa.pool1",
    f"backend.cassa.pool1.nodes = 127.0.0.1:{CASSA_PORT}\nbackend.cassa.pool1.username = hookbridge\n"
    f"backend.cassa.pool1.password = hookbridge\nbackend.cassa.pool1.keyspace = {NAME}\n"
    "backend.cassa.pool1.batch_time = 1ms\n",
)
MYSQL = TestSource(
    "mysql.pool1",
    f"backend.mysql.pool1.server = 127.0.0.1:{MYSQL_PORT}\nbackend.mysql.pool1.username = hookbridge\n"
    f"backend.mysql.pool1.password = hookbridge\nbackend.mysql.pool1.database = {NAME}\n"
    "backend.mysql.pool1.batch_time = 1ms\n",
)
SOURCES = {"pgsql": PGSQL, "mongo": MONGO, "cassa": CASSA, "mysql": MYSQL}


async def empty(source: TestSource) -> None:
    """Start the server if needed and drop the test's own database / keyspace (the bridge recreates it)."""
    if source.db == "pgsql":
        start_postgres(PG_PORT)
        conn = await asyncpg.connect(postgres_dsn(PG_PORT))
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {NAME} WITH (FORCE)")
            await conn.execute(f"CREATE DATABASE {NAME}")
        finally:
            await conn.close()
    elif source.db == "mysql":
        # The script grants hookbridge its own database `spark_test` (and creates it).
        env = {**os.environ, "HOOKBRIDGE_MYSQL_DATABASE": NAME}
        script = ["bash", str(ROOT / "scripts" / "mariadb.sh"), str(MYSQL_PORT)]
        await asyncio.to_thread(subprocess.run, script, check=True, env=env)
        await _mysql(f"DROP DATABASE IF EXISTS {NAME}", f"CREATE DATABASE {NAME}")
    elif source.db == "mongo":
        start_ferretdb(MONGO_PORT)
        await asyncio.to_thread(_drop_mongo)
    else:
        start_cassandra(CASSA_PORT)
        await asyncio.to_thread(_cassa, f"DROP KEYSPACE IF EXISTS {NAME}")


async def event_log_rows(source: TestSource) -> int:
    if source.db == "pgsql":
        conn = await asyncpg.connect(postgres_dsn(PG_PORT, NAME))
        try:
            return int(await conn.fetchval("SELECT count(*) FROM mqtt_event_log"))
        finally:
            await conn.close()
    if source.db == "mysql":
        return int((await _mysql(f"SELECT count(*) FROM {NAME}.mqtt_event_log"))[0][0])
    if source.db == "mongo":
        return await asyncio.to_thread(_count_mongo)
    rows = await asyncio.to_thread(_cassa, f"SELECT count(*) FROM {NAME}.event_log")
    return int(rows[0][0])


async def _mysql(*statements: str) -> list[tuple[object, ...]]:
    conn = await asyncmy.connect(host="127.0.0.1", port=MYSQL_PORT, user="hookbridge", password="hookbridge")
    try:
        async with conn.cursor() as cursor:
            for statement in statements:
                await cursor.execute(statement)
            return list(await cursor.fetchall())
    finally:
        conn.close()


def _drop_mongo() -> None:
    client: MongoClient[dict[str, object]] = MongoClient(f"mongodb://127.0.0.1:{MONGO_PORT}/?directConnection=true")
    try:
        client.drop_database(NAME)
    finally:
        client.close()


def _count_mongo() -> int:
    client: MongoClient[dict[str, object]] = MongoClient(f"mongodb://127.0.0.1:{MONGO_PORT}/?directConnection=true")
    try:
        return int(client[NAME]["mqtt_event_log"].count_documents({}))
    finally:
        client.close()


def _cassa(statement: str) -> list[tuple[object, ...]]:
    cluster = Cluster(
        ["127.0.0.1"],
        port=CASSA_PORT,
        auth_provider=PlainTextAuthProvider("hookbridge", "hookbridge"),
        protocol_version=5,
    )
    try:
        session = cluster.connect()
        return list(session.execute(statement, timeout=60))
    finally:
        cluster.shutdown()
