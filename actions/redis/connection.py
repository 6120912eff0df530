"""A pool's connections: to its one server (`type = single`), or to the primary its Sentinels name
(`type = sentinel`, redis.asyncio.sentinel).

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


def connection_pool(pool: Any, max_connections: int, **options: Any) -> aioredis.ConnectionPool:
    """The redis-py connection pool of a hookbridge pool (`options`: more connection settings)."""
    tls = tls_options(pool)
    timeouts = {"socket_connect_timeout": pool["request_timeout"], "socket_timeout": pool["request_timeout"]}
    settings: dict[str, Any] = {
        "db": pool["database"],
        "username": pool["username"] or None,
        "password": pool["password"] or None,
        "max_connections": max_connections,
        "protocol": 2,
        **timeouts,
        **tls,
        **options,
    }
    if pool["type"] == "sentinel":
        # The Sentinels themselves: plain connections with the same timeouts (no password: a
        # Sentinel with `requirepass` is not supported, docs/backends/redis.md#sentinel).
        sentinel = Sentinel(servers(pool), sentinel_kwargs=dict(timeouts))  # type: ignore[no-untyped-call]
        managed = PackedSentinelSSLConnection if tls else PackedSentinelConnection
        return SentinelConnectionPool(  # type: ignore[no-untyped-call]
            pool["sentinel"], sentinel, connection_class=managed, **settings
        )
    host, port = servers(pool)[0]
    kind = PackedSSLConnection if tls else PackedConnection
    return aioredis.ConnectionPool(host=host, port=port, connection_class=kind, **settings)
