"""The declared settings: one table drives validation, defaults and the docs.

Global keys are listed in GLOBAL; pool keys (`backend.<db>.<pool>.<key>`) in
POOL_COMMON plus the per-database tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.conf import addresses as a
from bridge.conf import values as v
from bridge.topics import filter_error


@dataclass(frozen=True, slots=True)
class Setting:
    parse: Callable[[str], Any]
    default: Any
    doc: str
    secret: bool = False
    example: str | None = None  # how it looks in a file, for the docs


def topic_filter(text: str) -> str:
    value = v.string(required=True)(text)
    problem = filter_error(value)
    if problem:
        raise ValueError(problem if problem.startswith("bad") else f"bad topic filter: {problem}")
    return value


topic_filter.__doc__ = "MQTT topic filter"

# MongoDB database names: no path or shell characters, under 64 bytes.
MONGO_NAME = v.described(
    'text, not empty, at most 63 bytes, without space or any of `/\\."$*<>:?` and `\\|`',
    v.string(required=True, max_bytes=63, forbidden='/\\. "$*<>:|?'),
)


def _tls_listener(name: str, what: str, example: str) -> dict[str, Setting]:
    """An embedded broker listener with TLS: `broker.listener.<name>` and its certificate keys."""
    key = f"broker.listener.{name}"
    return {
        key: Setting(a.optional_listener, None, f"embedded mode: {what}; `off` (default) disables", example=example),
        f"{key}.certfile": Setting(
            v.parse_str, "", "the server's certificate (PEM), required", example="etc/server.crt"
        ),
        f"{key}.keyfile": Setting(v.parse_str, "", "its private key (PEM, no passphrase)", example="etc/server.key"),
        f"{key}.cafile": Setting(
            v.parse_str, "", "CA bundle client certificates are verified against; empty: the system's CAs"
        ),
        f"{key}.verify_peer": Setting(v.parse_bool, False, "require a client certificate the CA signed"),
        f"{key}.peer_cert_as_username": Setting(
            v.enum_of("cn", "off"),
            "off",
            "`cn`: the client certificate's common name is the user name; no password needed (needs verify_peer = on)",
        ),
    }


GLOBAL: dict[str, Setting] = {
    "node.name": Setting(
        v.string(required=True, max_bytes=255), "hookbridge@127.0.0.1", "name of this bridge node; stored as `node`"
    ),
    "broker.mode": Setting(
        v.enum_of("embedded", "emqx", "mqtt"),
        "embedded",
        "where events come from: embedded broker, EMQX 5, any MQTT broker",
    ),
    "broker.listener.tcp": Setting(
        a.parse_listener, ("127.0.0.1", 1883), "embedded mode: MQTT listener address", example="127.0.0.1:1883"
    ),
    # -- the embedded broker's listeners and anonymous access (SPEC 6.2, docs/security.md) ------
    "broker.allow_anonymous": Setting(
        v.parse_bool,
        None,
        "embedded mode: whether a client may connect without a user name; default on only if every "
        "listener binds a loopback address. A listener other clients can reach with nothing to "
        "authenticate them (no password file, no users in a database, no client certificates) stops the "
        "start unless this is on",
    ),
    **_tls_listener("ssl", "MQTT over TLS listener", "0.0.0.0:8883"),
    "broker.listener.ws": Setting(
        a.optional_listener,
        None,
        "embedded mode: MQTT over WebSocket listener, path `/mqtt`; `off` (default) disables",
        example="0.0.0.0:8083",
    ),
    **_tls_listener("wss", "MQTT over WebSocket and TLS listener, path `/mqtt`", "0.0.0.0:8084"),
    "broker.max_offline_messages": Setting(
        v.int_in(0, 100_000_000),
        100_000,
        "embedded mode: QoS 1/2 messages kept per offline persistent session; 0: no limit",
    ),
    "broker.server": Setting(a.parse_hostport, ("127.0.0.1", 1883), "external modes: broker to connect to"),
    "broker.clientid": Setting(
        v.string(required=True), "hookbridge-1", "external modes: fixed client id (session persists)"
    ),
    "broker.username": Setting(v.parse_str, "", "external modes: username"),
    "broker.password": Setting(v.parse_str, "", "external modes: password", secret=True),
    "broker.ssl": Setting(v.parse_bool, False, "external modes: TLS to the broker"),
    "broker.ssl.cafile": Setting(v.parse_str, "", "CA bundle to verify the broker"),
    "broker.ssl.certfile": Setting(v.parse_str, "", "client certificate"),
    "broker.ssl.keyfile": Setting(v.parse_str, "", "client key"),
    "broker.ssl.verify": Setting(v.parse_bool, True, "verify the broker's certificate"),
    "broker.shared_group": Setting(
        v.string(forbidden="/+#"), "", "subscribe through $share/<group>/<filter>; empty: plain"
    ),
    "broker.receive_maximum": Setting(v.int_in(1, 65535), 1024, "QoS 1 messages in flight to the bridge"),
    "broker.session_expiry": Setting(
        v.duration_in(0, 0xFFFFFFFF),
        7 * 86400.0,
        "external modes: how long the broker keeps the bridge's session",
        example="7d",
    ),
    "broker.emqx.api": Setting(a.http_url, "http://127.0.0.1:18083", "emqx mode: REST API base URL"),
    "broker.emqx.api_key": Setting(v.parse_str, "", "emqx mode: API key", secret=True),
    "broker.emqx.api_secret": Setting(v.parse_str, "", "emqx mode: API secret", secret=True),
    "broker.emqx.event_topic": Setting(
        topic_filter, "hookbridge/events/#", "emqx mode: where EMQX rules republish $events/*"
    ),
    "metrics.listener": Setting(
        a.optional_listener, ("127.0.0.1", 9100), "GET /metrics and /healthz; `off` disables", example="127.0.0.1:9100"
    ),
    "spool.dir": Setting(
        v.writable_dir,
        "data/spool",
        "on-disk spool for actions a pool cannot write now (database down, queue full); relative to the "
        "working directory",
    ),
    "spool.max_bytes": Setting(
        v.size_in(64 << 10, 16 << 40), 1 << 30, "bound of the spool, all pools together", example="1GB"
    ),
    "spool.overflow": Setting(
        v.enum_of("block", "drop_oldest"),
        "block",
        "when the spool is full: `block` (actions wait: back-pressure to the broker) or `drop_oldest` "
        "(the oldest spooled actions are deleted and counted `dropped`)",
    ),
    "log.level": Setting(v.enum_of("debug", "info", "warning", "error"), "info", "log level"),
    "log.format": Setting(v.enum_of("text", "json"), "text", "log line format on stderr"),
}

POOL_COMMON: dict[str, Setting] = {
    "server": Setting(a.parse_hostport, None, "database address", example="127.0.0.1:6379"),
    "pool_size": Setting(v.int_in(1, 1024), 8, "connections in the pool"),
    "username": Setting(v.parse_str, "", "login name"),
    "password": Setting(v.parse_str, "", "password", secret=True),
    "auto_schema": Setting(v.parse_bool, True, "create missing tables / keyspace / indexes at start"),
    "ssl": Setting(v.parse_bool, False, "TLS to the database"),
    "ssl.cafile": Setting(v.parse_str, "", "CA bundle to verify the server"),
    "ssl.certfile": Setting(v.parse_str, "", "client certificate"),
    "ssl.keyfile": Setting(v.parse_str, "", "client key"),
    "ssl.verify": Setting(v.parse_bool, True, "verify the server certificate and host name"),
    "batch_size": Setting(v.int_in(1, 100_000), 2000, "most actions written in one batch"),
    "batch_time": Setting(v.duration_in(0, 60), 0.005, "longest wait to fill a batch", example="5ms"),
    "max_inflight": Setting(v.int_in(1, 256), 4, "batches written concurrently (ordering lanes)"),
    "queue_size": Setting(v.int_in(1, 100_000_000), 100_000, "actions waiting in memory before back-pressure"),
    "retry_backoff_max": Setting(v.duration_in(0.01, 3600), 5.0, "longest pause between retries", example="5s"),
    "request_timeout": Setting(
        v.duration_in(0.1, 3600),
        5.0,
        "a request the database has not answered within this time means the pool is down (a stalled "
        "server, a dead network path): /healthz reports it and its actions go to the spool",
        example="5s",
    ),
    "trim_interval": Setting(
        v.duration_in(0.1, 86400),
        60.0,
        "how often expired messages are removed (rules with expired_time)",
        example="60s",
    ),
}

POOL_BY_DB: dict[str, dict[str, Setting]] = {
    "redis": {
        "type": Setting(v.enum_of("single"), "single", "deployment type (single node)"),
        "database": Setting(v.int_in(0, 2**31 - 1), 0, "Redis logical database number"),
    },
    "pgsql": {"database": Setting(v.string(required=True, max_bytes=63), "mqtt", "database name")},
    "mongo": {
        "server": Setting(
            a.parse_hostports, None, "server address, or several, comma-separated", example="127.0.0.1:27017"
        ),
        "type": Setting(v.enum_of("single", "rs"), "single", "single server or replica set"),
        "database": Setting(MONGO_NAME, "mqtt", "database name"),
        "login": Setting(v.parse_str, "", "login name (EMQX's name for `username`; either works)"),
        "auth_source": Setting(MONGO_NAME, "admin", "authentication database"),
        "replica_set": Setting(v.parse_str, "", "replica set name"),
    },
    "cassa": {
        "nodes": Setting(a.parse_hostports, None, "contact points", example="127.0.0.1:9042"),
        "keyspace": Setting(v.parse_identifier, "mqtt", "keyspace"),
        "local_datacenter": Setting(v.string(required=True), "datacenter1", "local data center for routing"),
        "consistency": Setting(
            v.enum_of("ONE", "LOCAL_ONE", "QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL"),
            "LOCAL_QUORUM",
            "consistency level of reads and writes",
        ),
        "replication": Setting(
            v.parse_replication,
            {"class": "SimpleStrategy", "replication_factor": 1},
            "keyspace replication (JSON), e.g. NetworkTopologyStrategy with a factor per data center",
        ),
        "concurrency": Setting(v.int_in(1, 32768), 256, "requests in flight at once (all lanes of the pool together)"),
    },
}

DEFAULT_PORTS = {"redis": 6379, "pgsql": 5432, "mongo": 27017, "cassa": 9042}


def pool_settings(db: str) -> dict[str, Setting]:
    return {**POOL_COMMON, **POOL_BY_DB[db]}
