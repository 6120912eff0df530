"""The open-file limit the embedded broker needs (docs/brokers.md#a-fleet-in-one-process): one descriptor per client
connection, plus a reserve for everything else the process holds open.

`run` raises the soft RLIMIT_NOFILE to the hard limit at start (a process may, without
privileges), so the usual `ulimit -n 1024` soft limit does not cap the broker at about 1,000
clients. `broker.max_connections = 0`, the default, means as many connections as the hard limit
holds beside the reserve (a fleet of 15,000 devices needs no setting where the hard limit allows
it, as Mosquitto's default has no connection limit). A value the hard limit cannot hold is
refused by `check` and `run` with a `path:line:col` error at that setting: before this, the
bridge started and then, at about 1,000 connections, clients got no CONNACK and the spool failed
with EMFILE.
"""

from __future__ import annotations

import resource

from bridge.conf.config import Config
from bridge.conf.errors import ConfError, Position

# Descriptors besides client connections: the listeners (MQTT, TLS, WebSocket, /metrics), the
# event loop's own (epoll, self-pipe), standard streams and the log, spool and dead-letter
# files, the durable store (SQLite, its WAL and shared memory), a client of /metrics or
# /healthz now and then, and the TLS trust store; the database pools' connections are counted
# apart (their pool_size each).
RESERVE_BASE = 128
# broker.max_connections = 0 where the hard limit is unlimited (as the setting's largest value).
UNLIMITED_CONNECTIONS = 1_000_000


def reserve(config: Config) -> int:
    """Descriptors the process needs besides its client connections."""
    return RESERVE_BASE + sum(int(pool.settings["pool_size"]) for pool in config.pools.values())


def hard_limit() -> int | None:
    """The hard RLIMIT_NOFILE, None when unlimited."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return None if hard == resource.RLIM_INFINITY else hard


def connections_for(config: Config) -> int:
    """broker.max_connections as the broker applies it: the setting, or with 0 as many as the
    open-file hard limit holds beside the reserve."""
    connections = int(config["broker.max_connections"])
    if connections:
        return connections
    hard = hard_limit()
    if hard is None:
        return UNLIMITED_CONNECTIONS
    return min(max(hard - reserve(config), 1), UNLIMITED_CONNECTIONS)


def open_file_problems(config: Config, hard: int | None = None) -> list[ConfError]:
    """Why the hard open-file limit cannot hold broker.max_connections (embedded mode only)."""
    if config["broker.mode"] != "embedded":
        return []
    hard = hard_limit() if hard is None else hard
    if hard is None:
        return []
    connections, spare = config["broker.max_connections"], reserve(config)
    where = config.values_at.get("broker.max_connections") or Position(config.path, 1, 1)
    if not connections:  # as many as fit: only a limit that holds nothing but the reserve is wrong
        if hard - spare >= 1:
            return []
        return [
            ConfError(
                where,
                f"the open-file hard limit (ulimit -Hn) is {hard}: the bridge needs {spare} open files besides "
                "its client connections (listeners, logs, spool, durable store, database connections), so no "
                "client could connect; raise the hard limit (systemd LimitNOFILE=, docker run --ulimit nofile=)",
            )
        ]
    if connections + spare <= hard:
        return []
    return [
        ConfError(
            where,
            f"broker.max_connections = {connections} needs {connections + spare} open files "
            f"({spare} besides the connections: listeners, logs, spool, durable store, {spare - RESERVE_BASE} "
            f"database connections) but the open-file hard limit (ulimit -Hn) is {hard}: set "
            f"broker.max_connections to at most {max(hard - spare, 0)} or raise the hard limit "
            "(systemd LimitNOFILE=, docker run --ulimit nofile=)",
        )
    ]


def raise_soft_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # macOS: an unlimited hard limit is above what a process may set
        return soft, soft
    return soft, hard
