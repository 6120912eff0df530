"""A pool's connections: to its one server (`type = single`), to the primary its Sentinels name
(`type = sentinel`, redis.asyncio.sentinel), or to the masters of a Redis Cluster (`type = cluster`:
redis.asyncio.cluster for the slot map and the reads, and one pool of lean connections per master
for the batched writes, cluster.py).

With Sentinel, each new connection asks the Sentinels for the primary's address (redis-py's
SentinelConnectionPool); a connection that breaks when the primary dies is dropped, and the runner
retries or spools its batch (docs/operations.md) until a Sentinel names the promoted replica. A
connection still open to a demoted primary gets READONLY replies: packing.pipeline drops it, so
the retry connects afresh.
"""

from __future__ import annotations

import ssl
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

from actions.redis.packing import (
    PackedConnection,
    PackedSentinelConnection,
    PackedSentinelSSLConnection,
    PackedSSLConnection,
)


def tls_options(pool: Any) -> dict[str, Any]:
    """redis-py's SSLConnection settings from the pool's `ssl*` keys (empty without TLS)."""
    if not pool["ssl"]:
        return {}
    verify = bool(pool["ssl.verify"])
    return {
        "ssl_ca_certs": pool["ssl.cafile"] or None,
        "ssl_certfile": pool["ssl.certfile"] or None,
        "ssl_keyfile": pool["ssl.keyfile"] or None,
        "ssl_cert_reqs": ssl.CERT_REQUIRED if verify else ssl.CERT_NONE,
        "ssl_check_hostname": verify,
    }


def servers(pool: Any) -> list[tuple[str, int]]:
    found = pool["server"]
    return list(found) if isinstance(found, list) else [found]


def _settings(pool: Any, max_connections: int, **options: Any) -> dict[str, Any]:
    return {
        "db": pool["database"],
        "username": pool["username"] or None,
        "password": pool["password"] or None,
        "max_connections": max_connections,
        "protocol": 2,
        "socket_connect_timeout": pool["request_timeout"],
        "socket_timeout": pool["request_timeout"],
        **tls_options(pool),
        **options,
    }


def connection_pool(pool: Any, max_connections: int, **options: Any) -> aioredis.ConnectionPool:
    """The redis-py connection pool of a hookbridge pool (`options`: more connection settings)."""
    settings = _settings(pool, max_connections, **options)
    tls = tls_options(pool)
    if pool["type"] == "sentinel":
        # The Sentinels themselves: plain connections with the same timeouts (no password: a
        # Sentinel with `requirepass` is not supported, docs/backends/redis.md#sentinel).
        timeouts = {"socket_connect_timeout": pool["request_timeout"], "socket_timeout": pool["request_timeout"]}
        sentinel = Sentinel(servers(pool), sentinel_kwargs=timeouts)  # type: ignore[no-untyped-call]
        managed = PackedSentinelSSLConnection if tls else PackedSentinelConnection
        return SentinelConnectionPool(  # type: ignore[no-untyped-call]
            pool["sentinel"], sentinel, connection_class=managed, **settings
        )
    host, port = servers(pool)[0]
    return node_pool(pool, host, port, max_connections, **options)


def node_pool(pool: Any, host: str, port: int, max_connections: int, **options: Any) -> aioredis.ConnectionPool:
    """Lean connections (packing.py) to one server: the single one, or one master of a cluster."""
    kind = PackedSSLConnection if pool["ssl"] else PackedConnection
    settings = _settings(pool, max_connections, **options)
    return aioredis.ConnectionPool(host=host, port=port, connection_class=kind, **settings)


def cluster_client(pool: Any, max_connections: int, **options: Any) -> RedisCluster:
    """redis-py's cluster client of a `type = cluster` pool: `server` lists seed nodes; it learns the
    others and the slot map from them (and again after a failover or a resharding)."""
    settings = _settings(pool, max_connections, **options)
    del settings["db"]  # a cluster has database 0 only (checked with the settings)
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in servers(pool)],
        ssl=bool(pool["ssl"]),
        **settings,
    )


def redis_client(pool: Any, max_connections: int, **options: Any) -> Any:
    """A redis-py client of the pool's kind: RedisCluster for `cluster`, else Redis over connection_pool."""
    if pool["type"] == "cluster":
        return cluster_client(pool, max_connections, **options)
    return aioredis.Redis(connection_pool=connection_pool(pool, max_connections, **options))
