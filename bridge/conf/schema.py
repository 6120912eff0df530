"""The declared settings: one table drives validation, defaults and the docs.

Global keys are the core's, listed in CORE, and those each broker mode declares with its plug-in
(bridge/brokers/<mode>/settings.py): `global_settings()` is them all. Pool keys
(`backend.<db>.<pool>.<key>`) are POOL_COMMON plus the table each backend declares with its plug-in
(bridge/conf/registry.py).
"""

from __future__ import annotations

import functools
from typing import Any

from bridge.conf import addresses as a
from bridge.conf import parsers as p
from bridge.conf import registry
from bridge.conf.setting import Setting


def api_keys(text: str) -> dict[str, Any]:
    from bridge.conf.apikeys import parse_api_keys

    return parse_api_keys(p.parse_str(text))


api_keys.__doc__ = "`<name>:sha256:<hex>[:read|:admin]`, comma-separated"


CORE: dict[str, Setting] = {
    "node.name": Setting(
        p.string(required=True, max_bytes=255), "hookbridge@127.0.0.1", "name of this bridge node; stored as `node`"
    ),
    "broker.mode": Setting(
        p.late_choice(lambda: registry.modes(), lambda name: registry.unavailable_note(registry.MODES_GROUP, name)),
        "embedded",
        "where events come from: embedded broker, EMQX 5, any MQTT broker",
    ),
    "metrics.listener": Setting(
        a.optional_listener, ("127.0.0.1", 9100), "GET /metrics and /healthz; `off` disables", example="127.0.0.1:9100"
    ),
    "metrics.listener.certfile": Setting(
        p.parse_str,
        "",
        "HTTPS on `metrics.listener` (/metrics, /healthz, the API): the server's certificate (PEM); empty: plain HTTP",
        example="etc/server.crt",
    ),
    "metrics.listener.keyfile": Setting(
        p.parse_str, "", "its private key (PEM, no passphrase)", example="etc/server.key"
    ),
    "api.enabled": Setting(
        p.parse_bool,
        False,
        "the management API under /api/v1/ on `metrics.listener` (docs/operations.md); off by default",
    ),
    "api.keys": Setting(
        api_keys,
        {},
        "API keys allowed, `<name>:sha256:<hex of the key's SHA-256>`, comma-separated, each with an optional "
        "scope `:read` (GET only) or `:admin` (everything; the default); a request sends "
        "`Authorization: Bearer <key>`, e.g. `ops:sha256:<sha256sum of the key>`, "
        "`grafana:sha256:<...>:read`. Read again on SIGHUP. Needed unless "
        "`api.allow_anonymous_loopback` is on and the listener is on loopback",
        secret=True,
        example="",  # none: shown as (empty)
    ),
    "api.allow_anonymous_loopback": Setting(
        p.parse_bool,
        False,
        "API requests from loopback (127.0.0.1, ::1) without a key, with a loopback `Host`, from no other origin, "
        "a change with `X-Hookbridge` or a JSON body (docs/operations.md); off: every request needs a key",
    ),
    "api.max_body": Setting(p.size_in(1024, 16 * 1024 * 1024), 64 * 1024, "largest API request body (413 above)"),
    "api.max_page": Setting(p.int_in(1, 10000), 1000, "largest `limit` of an API list (400 above)"),
    "api.sample_interval": Setting(
        p.duration_in(0.1, 600),
        10.0,
        "how often the throughput the dashboard charts (GET /api/v1/stats: connections, messages/s) is "
        "sampled; the last hour is kept",
        example="10s",
    ),
    "spool.dir": Setting(
        p.writable_dir,
        "data/spool",
        "on-disk spool for actions a pool cannot write now (database down, queue full); relative to the "
        "working directory",
    ),
    "deadletter.dir": Setting(
        p.writable_dir,
        "data/deadletter",
        "where actions that failed for good (after their message was acknowledged) are kept, one JSON "
        "line each in `<pool>.jsonl` (docs/operations.md, Dead letters); relative to the working directory",
    ),
    "deadletter.max_bytes": Setting(
        p.size_in(4 << 10, 16 << 40),
        1 << 30,
        "bound of the dead-letter files together; past it a failed action is logged and counted as dropped",
        example="1GB",
    ),
    "spool.max_bytes": Setting(
        p.size_in(64 << 10, 16 << 40), 1 << 30, "bound of the spool, all pools together", example="1GB"
    ),
    "spool.overflow": Setting(
        p.enum_of("block", "drop_oldest"),
        "block",
        "when the spool is full: `block` (actions wait: back-pressure to the broker) or `drop_oldest` "
        "(the oldest spooled actions are deleted and counted `dropped`)",
    ),
    "gc.freeze_after": Setting(
        p.duration_in(0, 60),
        0.05,
        "after a full garbage collection that paused the process this long or longer, its surviving "
        "objects are frozen (gc.freeze()): no later collection walks them again, so pauses stay short at a "
        "million subscriptions (docs/operations.md); 0: never (CPython's own collector alone)",
        example="50ms",
    ),
    "gc.young_threshold": Setting(
        p.int_in(100, 10_000_000),
        10_000,
        "allocations (less deallocations) of tracked objects between two collections of the youngest "
        "generation: CPython's own 700 promotes the messages in flight to the older generations, which are "
        "then walked again and again (docs/operations.md); 700 is CPython's default",
        example="10000",
    ),
    "gc.thaw_interval": Setting(
        p.duration_in(0, 7 * 86400),
        0.0,
        "with `gc.freeze_after`: every this interval the frozen objects are unfrozen and collected once (one "
        "full-length pause, logged), so whatever frozen objects left in reference cycles is freed; 0 (default): "
        "never (the broker's connections, sessions and subscriptions leave none)",
        example="1h",
    ),
    "log.level": Setting(p.enum_of("debug", "info", "warning", "error"), "info", "log level"),
    "log.format": Setting(p.enum_of("text", "json"), "text", "log line format on stderr"),
}


@functools.cache
def global_settings() -> dict[str, Setting]:
    """Every global key: the core's (CORE) and those each installed broker mode declares with its
    plug-in (`ModePlugin.settings`), the node and the mode first. Modes may share a setting (the
    external modes' connection); two different settings of one key are a mistake of a plug-in."""
    found = {key: CORE[key] for key in ("node.name", "broker.mode")}
    for mode in registry.modes().values():
        for key, setting in mode.settings.items():
            if found.setdefault(key, setting) is not setting or key in CORE:
                raise TypeError(f"broker mode {mode.name} declares {key}, which another mode or the core declares")
    return {**found, **CORE}


POOL_COMMON: dict[str, Setting] = {
    "server": Setting(a.parse_hostport, None, "database address", example="127.0.0.1:6379"),
    "pool_size": Setting(p.int_in(1, 1024), 8, "connections in the pool"),
    "username": Setting(p.parse_str, "", "login name"),
    "password": Setting(p.parse_str, "", "password", secret=True),
    "auto_schema": Setting(p.parse_bool, True, "create missing tables / keyspace / indexes at start"),
    "ssl": Setting(p.parse_bool, False, "TLS to the database"),
    "ssl.cafile": Setting(p.parse_str, "", "CA bundle to verify the server"),
    "ssl.certfile": Setting(p.parse_str, "", "client certificate"),
    "ssl.keyfile": Setting(p.parse_str, "", "client key"),
    "ssl.verify": Setting(p.parse_bool, True, "verify the server certificate and host name"),
    "batch_size": Setting(p.int_in(1, 100_000), 2000, "most actions written in one batch"),
    "batch_time": Setting(p.duration_in(0, 60), 0.005, "longest wait to fill a batch", example="5ms"),
    "max_inflight": Setting(p.int_in(1, 256), 4, "batches written concurrently (ordering lanes)"),
    "queue_size": Setting(p.int_in(1, 100_000_000), 100_000, "actions waiting in memory before back-pressure"),
    "retry_backoff_max": Setting(p.duration_in(0.01, 3600), 5.0, "longest pause between retries", example="5s"),
    "request_timeout": Setting(
        p.duration_in(0.1, 3600),
        5.0,
        "a request the database has not answered within this time means the pool is down (a stalled "
        "server, a dead network path): /healthz reports it and its actions go to the spool",
        example="5s",
    ),
    "trim_interval": Setting(
        p.duration_in(0.1, 86400),
        60.0,
        "how often expired messages are removed (rules with expired_time)",
        example="60s",
    ),
    # EMQX 4.4's semantics, for configs written by `hookbridge import-emqx` (docs/import-emqx.md);
    # the defaults keep hookbridge's own behaviour
    "fetch_clean_sessions": Setting(
        p.parse_bool,
        False,
        "on: the pool's fetch functions also deliver stored messages to a new QoS>0 subscription of a "
        "clean session (EMQX 4.4); off: to persistent sessions only",
    ),
    "default_expired_time": Setting(
        p.int_in(0, 630_720_000),
        0,
        "seconds a message stored by on_message_publish / on_message_store lives when its rule sets no "
        "expired_time (0: no expiry; EMQX 4.4's Redis backend: 7200)",
    ),
}


def pool_settings(db: str) -> dict[str, Setting]:
    """Every setting of a `<db>` pool: the common ones and those its backend declares."""
    return {**POOL_COMMON, **registry.backends()[db].settings}
