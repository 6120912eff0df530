"""Which database a report reads (`--source <db>.<pool>` of the bridge's config), and a quick check
that it answers and has the tables, with the bridge's own drivers, before Spark starts: a wrong
password or a missing table is then one clear line within seconds, not a JVM stack trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.conf.config import PoolConfig, load_config
from bridge.conf.errors import ConfErrors
from spark_analytics.errors import ReportError

SUPPORTED = ("pgsql", "cassa", "mongo", "mysql")

# The report's tables under each backend's names (docs/backends/<db>.md).
TABLES: dict[str, dict[str, str]] = {
    "pgsql": {"event_log": "mqtt_event_log", "msg": "mqtt_msg", "acked": "mqtt_acked"},
    "mysql": {"event_log": "mqtt_event_log", "msg": "mqtt_msg", "acked": "mqtt_acked"},
    "mongo": {"event_log": "mqtt_event_log", "msg": "mqtt_msg", "acked": "mqtt_acked"},
    "cassa": {"event_log": "event_log", "msg": "msg", "acked": "acked"},
}

# Which function writes each table: said when one is missing.
WRITTEN_BY = {
    "event_log": "on_event_log",
    "msg": "on_message_publish / on_message_store",
    "acked": "on_message_acked (pubsub offsets)",
}


@dataclass(frozen=True)
class Source:
    pool: PoolConfig

    @property
    def db(self) -> str:
        return self.pool.db

    @property
    def id(self) -> str:
        return self.pool.id

    def table(self, name: str) -> str:
        return TABLES[self.db][name]

    def setting(self, key: str) -> Any:
        return self.pool[key]


def load_source(config_path: str | Path, source: str) -> Source:
    try:
        config = load_config(config_path)
    except ConfErrors as exc:
        raise ReportError("\n".join(str(error) for error in exc.errors), code=2) from None
    except OSError as exc:
        raise ReportError(f"cannot read the config {config_path}: {exc.strerror}", code=2) from None
    pool = config.pools.get(source)
    if pool is None:
        known = ", ".join(sorted(p for p in config.pools if p.split(".")[0] in SUPPORTED)) or "none"
        raise ReportError(f"{config_path}: no pool {source!r} to read (reportable pools: {known})", code=2)
    if pool.db not in SUPPORTED:
        raise ReportError(
            f"--source {source}: reports read PostgreSQL, MySQL, Cassandra or MongoDB pools, not {pool.db}", code=2
        )
    return Source(pool)


def check(source: Source, needed: tuple[str, ...]) -> None:
    """Raise ReportError unless the source answers and holds every `needed` table."""
    checkers = {
        "pgsql": _existing_pgsql,
        "mysql": _existing_mysql,
        "mongo": _existing_mongo,
        "cassa": _existing_cassa,
    }
    try:
        existing = checkers[source.db](source)
    except ReportError:
        raise
    except Exception as exc:  # refused connection, bad login, timeout: the driver's words, one line
        raise ReportError(f"source {source.id} ({_where(source)}) is not reachable: {exc}") from None
    for name in needed:
        if source.table(name) not in existing:
            raise ReportError(
                f"source {source.id} ({_where(source)}) has no table {source.table(name)}: bind "
                f"{WRITTEN_BY[name]} in the rules (or run `hookbridge schema --pool {source.id} --apply`)"
            )


def _where(source: Source) -> str:
    if source.db in ("pgsql", "mysql"):
        host, port = source.setting("server")
        return f"{host}:{port}/{source.setting('database')}"
    if source.db == "mongo":
        servers = ",".join(f"{h}:{p}" for h, p in source.setting("server"))
        return f"{servers}/{source.setting('database')}"
    nodes = ",".join(f"{h}:{p}" for h, p in source.setting("nodes") or [("127.0.0.1", 9042)])
    return f"{nodes} keyspace {source.setting('keyspace')}"


def _existing_pgsql(source: Source) -> set[str]:
    import asyncio

    import asyncpg

    async def tables() -> set[str]:
        host, port = source.setting("server")
        conn = await asyncpg.connect(
            host=host,
            port=port,
            user=source.setting("username") or None,
            password=source.setting("password") or None,
            database=source.setting("database"),
            timeout=10,
        )
        try:
            rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        finally:
            await conn.close()
        return {row["tablename"] for row in rows}

    return asyncio.run(tables())


def _existing_mysql(source: Source) -> set[str]:
    import asyncio

    import asyncmy

    from bridge.conf.tls import settings_context

    async def tables() -> set[str]:
        host, port = source.setting("server")
        conn = await asyncmy.connect(
            host=host,
            port=port,
            user=source.setting("username") or source.setting("user") or None,
            password=source.setting("password") or "",
            db=source.setting("database"),
            ssl=settings_context(source.pool.settings),
            connect_timeout=10,
        )
        try:
            async with conn.cursor() as cursor:
                await cursor.execute("SHOW TABLES")
                rows = await cursor.fetchall()
        finally:
            conn.close()
        return {row[0] for row in rows}

    return asyncio.run(tables())


def _existing_mongo(source: Source) -> set[str]:
    from pymongo import MongoClient

    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri(source), serverSelectionTimeoutMS=5000)
    try:
        return set(client[source.setting("database")].list_collection_names())
    finally:
        client.close()


def _existing_cassa(source: Source) -> set[str]:
    from actions.cassa.session import build_cluster

    cluster = build_cluster(source.pool)
    try:
        cluster.connect()
        keyspace = cluster.metadata.keyspaces.get(source.setting("keyspace"))
        if keyspace is None:
            raise ReportError(f"source {source.id} ({_where(source)}): no keyspace {source.setting('keyspace')}")
        return set(keyspace.tables)
    finally:
        cluster.shutdown()


def mongo_uri(source: Source) -> str:
    """A connection string with what the bridge's Mongo pool settings say (login, TLS, replica set)."""
    from urllib.parse import quote, urlencode

    hosts = ",".join(f"{host}:{port}" for host, port in source.setting("server"))
    login = source.setting("login") or source.setting("username")
    credentials = f"{quote(login, safe='')}:{quote(source.setting('password') or '', safe='')}@" if login else ""
    params: dict[str, str] = {}
    if login:
        params["authSource"] = source.setting("auth_source")
    if source.setting("replica_set"):
        params["replicaSet"] = source.setting("replica_set")
    elif len(source.setting("server")) == 1:
        params["directConnection"] = "true"
    if source.setting("ssl"):
        params["tls"] = "true"
        if source.setting("ssl.cafile"):
            params["tlsCAFile"] = source.setting("ssl.cafile")
        if not source.setting("ssl.verify"):
            params["tlsAllowInvalidCertificates"] = "true"
    query = f"?{urlencode(params)}" if params else ""
    return f"mongodb://{credentials}{hosts}/{query}"
