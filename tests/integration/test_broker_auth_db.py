"""Users of the embedded broker held in a real PostgreSQL (table `mqtt_user`) and a real MongoDB
protocol server (FerretDB, collection `mqtt_user`), with every EMQX 4 password hash, the lookup
cache, and a database that does not answer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest
from pymongo import AsyncMongoClient

from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client
from support.process import free_port
from support.services import postgres_dsn, start_ferretdb, start_postgres
from tests.integration.test_broker_auth import BAD_CREDENTIALS, HASHES, NO_RULES, SERVER_UNAVAILABLE, connack, stored

PG_PORT = 5439  # shared with test_pgsql.py: scripts/postgres.sh reuses a running server
MONGO_PORT = 27018  # shared with test_mongo.py and the conformance suite
PG_POOL = (
    f"backend.pgsql.users.server = 127.0.0.1:{PG_PORT}\nbackend.pgsql.users.username = hookbridge\n"
    "backend.pgsql.users.password = hookbridge\nbackend.pgsql.users.database = mqtt\n"
)
MONGO_POOL = f"backend.mongo.users.server = 127.0.0.1:{MONGO_PORT}\nbackend.mongo.users.database = mqtt_auth_test\n"
# EMQX 4's table, as its emqx_auth_pgsql documentation creates it, with room for a sha512 hex digest
USER_TABLE = """
CREATE TABLE IF NOT EXISTS mqtt_user (
  id SERIAL PRIMARY KEY,
  username CHARACTER VARYING(100) UNIQUE,
  password CHARACTER VARYING(128),
  salt CHARACTER VARYING(40),
  is_superuser BOOLEAN
)
"""


@pytest.fixture
async def pg_users() -> AsyncIterator[asyncpg.Connection]:
    start_postgres(PG_PORT)
    conn = await asyncpg.connect(postgres_dsn(PG_PORT))
    await conn.execute(USER_TABLE)
    await conn.execute("TRUNCATE mqtt_user")
    yield conn
    await conn.execute("DROP TABLE mqtt_user")
    await conn.close()


@pytest.fixture
async def mongo_users() -> AsyncIterator[object]:
    start_ferretdb(MONGO_PORT)
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        f"mongodb://127.0.0.1:{MONGO_PORT}/?directConnection=true"
    )
    collection = client["mqtt_auth_test"]["mqtt_user"]
    await collection.delete_many({})
    yield collection
    await client.drop_database("mqtt_auth_test")
    await client.close()


@pytest.mark.parametrize("setting", HASHES)
async def test_postgresql_users_with_each_password_hash(
    setting: str,
    pg_users: asyncpg.Connection,
    make_bridge: BridgeFactory,
    paho_clients: Callable[..., Client],
) -> None:
    password, salt = stored(setting, "pa55-word")
    await pg_users.execute(
        "INSERT INTO mqtt_user (username, password, salt, is_superuser) VALUES ('alice', $1, $2, false)",
        password,
        salt or None,  # a user without salt holds NULL
    )
    bridge = await make_bridge(
        NO_RULES, PG_POOL + f"broker.auth.backend = pgsql.users\nbroker.auth.password_hash = {setting}\n"
    )
    port = mqtt_port(bridge)
    assert await connack(paho_clients, port, "alice", "pa55-word") == 0
    assert await connack(paho_clients, port, "alice", "pa55-word ") == BAD_CREDENTIALS
    assert await connack(paho_clients, port, "alice'--", "pa55-word") == BAD_CREDENTIALS  # a bound parameter


@pytest.mark.parametrize("setting", HASHES)
async def test_mongodb_users_with_each_password_hash(
    setting: str, mongo_users: object, make_bridge: BridgeFactory, paho_clients: Callable[..., Client]
) -> None:
    password, salt = stored(setting, "pa55-word")
    await mongo_users.insert_one({"username": "alice", "password": password, "salt": salt, "is_superuser": False})  # type: ignore[attr-defined]
    bridge = await make_bridge(
        NO_RULES, MONGO_POOL + f"broker.auth.backend = mongo.users\nbroker.auth.password_hash = {setting}\n"
    )
    port = mqtt_port(bridge)
    assert await connack(paho_clients, port, "alice", "pa55-word") == 0
    assert await connack(paho_clients, port, "alice", "Pa55-word") == BAD_CREDENTIALS
    assert await connack(paho_clients, port, "bob", "pa55-word") == BAD_CREDENTIALS


async def test_postgresql_lookups_are_cached(
    pg_users: asyncpg.Connection, make_bridge: BridgeFactory, paho_clients: Callable[..., Client]
) -> None:
    await pg_users.execute("INSERT INTO mqtt_user (username, password) VALUES ('alice', 'pw')")
    bridge = await make_bridge(
        NO_RULES, PG_POOL + "broker.auth.backend = pgsql.users\nbroker.auth.password_hash = plain\n"
    )
    port = mqtt_port(bridge)
    for _ in range(20):
        assert await connack(paho_clients, port, "alice", "pw") == 0
    assert bridge.broker.gate is not None and bridge.broker.gate.users is not None
    assert bridge.broker.gate.users.store.lookups == 1


@pytest.mark.parametrize("db", ["pgsql", "mongo"])
async def test_a_database_that_does_not_answer_refuses_logins(
    db: str, make_bridge: BridgeFactory, paho_clients: Callable[..., Client]
) -> None:
    dead = free_port()
    bridge = await make_bridge(
        NO_RULES,
        f"broker.auth.backend = {db}.users\nbackend.{db}.users.server = 127.0.0.1:{dead}\n"
        f"backend.{db}.users.request_timeout = 500ms\n",
    )
    port = mqtt_port(bridge)
    assert await connack(paho_clients, port, "alice", "pw") == SERVER_UNAVAILABLE
    assert bridge.broker.refused["login_backend_down"] == 1
