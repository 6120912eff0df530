"""Every conformance test runs once per backend, each on its real server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from conformance.cassa_store import CassaStore
from conformance.mysql_store import MysqlStore
from conformance.stores import MongoStore, PgsqlStore, RedisStore, Store
from support.services import start_cassandra, start_ferretdb, start_mariadb, start_postgres, start_redis, stop_redis

REDIS_PORT = 6395  # its own server: the outage tests stop and restart it
PGSQL_PORT = 5439
MONGO_PORT = 27018  # FerretDB (no MongoDB server is packaged anywhere this machine reaches)
CASSA_PORT = 9042  # scripts/test.sh starts this node in the background before pytest
MYSQL_PORT = 3307  # MariaDB (scripts/mariadb.sh); its own server: the outage tests stop and restart it


@pytest.fixture(scope="session")
def redis_store_server() -> int:
    # Restarted, not reused: the outage test stops and starts it, and must find its data again in
    # this checkout's .run/ (a server some other checkout started keeps its files elsewhere).
    stop_redis(REDIS_PORT)
    start_redis(REDIS_PORT, "--appendonly", "yes", "--appendfsync", "always")
    return REDIS_PORT


@pytest.fixture(scope="session")
def pgsql_store_server() -> int:
    start_postgres(PGSQL_PORT)
    return PGSQL_PORT


@pytest.fixture(scope="session")
def mongo_store_server() -> int:
    start_ferretdb(MONGO_PORT)
    return MONGO_PORT


@pytest.fixture(scope="session")
def cassa_store_server() -> int:
    start_cassandra(CASSA_PORT)  # waits for the node scripts/test.sh started, or starts one
    return CASSA_PORT


@pytest.fixture(scope="session")
def mysql_store_server() -> int:
    start_mariadb(MYSQL_PORT)
    return MYSQL_PORT


@pytest.fixture(params=["redis", "pgsql", "mongo", "cassa", "mysql"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    chosen: Store
    if request.param == "redis":
        chosen = RedisStore(request.getfixturevalue("redis_store_server"))
    elif request.param == "cassa":
        chosen = CassaStore(request.getfixturevalue("cassa_store_server"))
    elif request.param == "mysql":
        chosen = MysqlStore(request.getfixturevalue("mysql_store_server"))
    elif request.param == "pgsql":
        chosen = PgsqlStore(request.getfixturevalue("pgsql_store_server"))
    else:
        chosen = MongoStore(request.getfixturevalue("mongo_store_server"))
    await chosen.open()
    yield chosen
    await chosen.close()
