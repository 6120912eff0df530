"""Redis backend (docs/backends/redis.md): backend.py runs batches; functions.py writes; reads.py reads then acts;
clients.py opens a pool's connections (one server, the primary that Sentinels name, or the
masters of a Redis Cluster, whose writes cluster.py splits into one-slot steps).
PLUGIN is its declaration (the `hookbridge.backends` entry point in pyproject.toml); importing this
package does not import the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.plugin import BackendPlugin, Setting
from bridge.plugin import addresses as a
from bridge.plugin import parsers as p


def parse_servers(text: str) -> Any:
    """One `host:port`, or several comma-separated (the Sentinels of a `type = sentinel` pool, the
    seed nodes of a `type = cluster` one)."""
    found = a.parse_hostports(text)
    return found[0] if len(found) == 1 else found


parse_servers.__doc__ = (
    "`host:port`; with `type = sentinel`, the Sentinels' `host:port`, comma-separated; with "
    "`type = cluster`, some of the cluster's nodes (seeds), comma-separated"
)


def pool_problems(settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Settings that are fine alone but not together."""
    problems: list[tuple[str, str]] = []
    several = isinstance(settings["server"], list)
    if settings["type"] == "single" and several:
        problems.append(("server", "a single Redis takes one host:port (several are Sentinels: type = sentinel)"))
    if settings["type"] == "sentinel" and not settings["sentinel"]:
        problems.append(("type", "a sentinel pool needs `sentinel`, the master name its Sentinels monitor"))
    if settings["type"] != "sentinel" and settings["sentinel"]:
        problems.append(("sentinel", "`sentinel` applies to type = sentinel only"))
    if settings["type"] == "cluster" and settings["database"]:
        problems.append(("database", "a Redis Cluster has database 0 only"))
    return problems


PLUGIN = BackendPlugin(
    name="redis",
    title="Redis",
    settings={
        "server": Setting(
            parse_servers,
            None,
            "Redis address; with `type = sentinel`, the Sentinels' addresses; with `type = cluster`, "
            "the addresses of some cluster nodes (EMQX 4.4's meaning)",
            example="127.0.0.1:6379",
        ),
        "type": Setting(
            p.enum_of("single", "sentinel", "cluster"),
            "single",
            "one server (`single`), the primary the Sentinels in `server` name (`sentinel`: "
            "docs/backends/redis.md#sentinel), or a Redis Cluster whose nodes `server` lists "
            "(`cluster`: docs/backends/redis.md#redis-cluster)",
        ),
        "sentinel": Setting(p.parse_str, "", "type = sentinel: the master name the Sentinels monitor"),
        "timestamps": Setting(
            p.enum_of("seconds", "milliseconds"),
            "seconds",
            "unit of the Unix times in `mqtt:client:<clientid>` (online_at, offline_at) and `mqtt:msg:<msgid>` "
            "(ts): `milliseconds` is what EMQX 4.4's Redis backend wrote",
        ),
        "wait_replicas": Setting(
            p.int_in(0, 16),
            0,
            "replicas that must hold each batch before it counts as written (Redis WAIT, within half of "
            "request_timeout; fewer: the batch is retried or spooled); with `cluster`, on every master "
            "the batch wrote. 1 with Sentinel or Cluster: what was acknowledged survives a failover",
        ),
        "database": Setting(p.int_in(0, 2**31 - 1), 0, "Redis logical database number (0 with `cluster`)"),
    },
    default_port=6379,
    backend="actions.redis.backend:RedisBackend",
    statements="commands",
    check_statement="actions.redis.commands:statement_problem",
    users="actions.redis.auth:RedisUsers",
    acl="actions.redis.auth:RedisAcl",
    check_pool="actions.redis:pool_problems",
)
