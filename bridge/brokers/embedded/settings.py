"""The embedded broker's settings (`broker.*`), declared with its mode (mode.py): validated and
documented from this one table, like a backend's pool settings (bridge/conf/schema.py holds the core's).
"""

from __future__ import annotations

import os

from bridge.brokers.embedded.codec.decoder import (
    DEFAULT_MAX_PACKET_SIZE as MQTT_MAX_PACKET,  # the largest MQTT can frame
)
from bridge.conf import addresses as a
from bridge.conf import parsers as p
from bridge.conf import registry
from bridge.conf.setting import Setting


def password_file(text: str) -> str:
    """A password file `run` can use: read and parsed now, so `check` reports its bad lines."""
    from bridge.brokers.embedded.auth.passwords import load_password_file

    value = p.parse_str(text)
    if value:
        load_password_file(value)  # PasswordFileError is a ValueError: `path:line:col: ...` lines
    return value


password_file.__doc__ = "path of a file `mosquitto_passwd` writes; empty: none"


def password_hash(text: str) -> str:
    from bridge.brokers.embedded.auth.hashes import parse_password_hash

    return str(parse_password_hash(text))  # validated here, made a PasswordHash by make_gate


password_hash.__doc__ = (
    "`plain`, `md5`, `sha`, `sha256`, `sha512`, `bcrypt`, `salt,<hash>`, `<hash>,salt` or "
    "`pbkdf2,<mac>,<iterations>,<dklen>`"
)


def _user_backends() -> list[str]:
    """The databases whose backend can hold the embedded broker's users and ACL."""
    return [name for name, plugin in registry.backends().items() if plugin.users and plugin.acl]


def user_backend(text: str) -> str:
    """`<db>.<pool>` of a database that can hold users, or empty."""
    value = p.parse_str(text).strip()
    db, dot, pool = value.partition(".")
    names = _user_backends()
    if value and (db not in names or not dot or not pool):
        shapes = [f"{name}.<pool>" for name in names]
        listed = ", ".join(shapes[:-1]) + f" or {shapes[-1]}" if len(shapes) > 1 else "".join(shapes)
        raise ValueError(f"{value!r} is not {listed}")
    return value


user_backend_setting = p.LateDescribed(
    user_backend, lambda: ", ".join(f"`{name}.<pool>`" for name in _user_backends()) + "; empty: none"
)


def bans_file(text: str) -> str:
    """The banned list's file: its directory must be writable (or creatable), as `run` writes it."""
    value = p.parse_str(text).strip()
    if value:
        p.writable_dir(os.path.dirname(value) or ".")
        if os.path.isdir(value):
            raise ValueError(f"{value} is a directory; give a file name")
    return value


def _tls_listener(name: str, what: str, example: str) -> dict[str, Setting]:
    """An embedded broker listener with TLS: `broker.listener.<name>` and its certificate keys."""
    key = f"broker.listener.{name}"
    return {
        key: Setting(a.optional_listener, None, f"embedded mode: {what}; `off` (default) disables", example=example),
        f"{key}.certfile": Setting(
            p.parse_str, "", "the server's certificate (PEM), required", example="etc/server.crt"
        ),
        f"{key}.keyfile": Setting(p.parse_str, "", "its private key (PEM, no passphrase)", example="etc/server.key"),
        f"{key}.cafile": Setting(
            p.parse_str, "", "CA bundle client certificates are verified against; empty: the system's CAs"
        ),
        f"{key}.verify_peer": Setting(p.parse_bool, False, "require a client certificate the CA signed"),
        f"{key}.peer_cert_as_username": Setting(
            p.enum_of("cn", "off"),
            "off",
            "`cn`: the client certificate's common name is the user name; no password needed (needs verify_peer = on)",
        ),
    }


SETTINGS: dict[str, Setting] = {
    "broker.listener.tcp": Setting(
        a.parse_listener, ("127.0.0.1", 1883), "embedded mode: MQTT listener address", example="127.0.0.1:1883"
    ),
    "broker.listener.tcp.transport": Setting(
        p.enum_of("broker", "loop"),
        "broker",
        "embedded mode: what moves the bytes of broker.listener.tcp's connections: `broker` (default), the "
        "broker's own (one epoll for every socket, about 120 bytes a connection; Linux: elsewhere the loop's); "
        "`loop`, the event loop's (uvloop's, about 1,200 bytes a connection). TLS and WebSocket listeners "
        "always use the loop's",
    ),
    # The embedded broker's limits (bridge/brokers/embedded/limits.py): one setting per `Limits`
    # field, same name and default; a test holds the two together.
    "broker.max_packet_size": Setting(
        p.size_in(128, MQTT_MAX_PACKET),
        1 << 20,
        "embedded mode: largest MQTT packet a client may send, header included; a bigger one closes "
        "its connection (MQTT 5 clients are told this limit when they connect)",
        example="1MB",
    ),
    "broker.persistent_session_expiry": Setting(
        p.duration_in(0, 0xFFFFFFFE),
        0.0,
        "embedded mode: how long a 3.1.1 session with clean session 0 is kept after its client goes, its "
        "queue with it (Mosquitto's persistent_client_expiration; EMQX 4.4: zone session_expiry_interval, 2h); "
        "0 (default): for ever, as 3.1.1 says. 5.0 clients set their own session expiry interval",
        example="7d",
    ),
    "broker.max_connections": Setting(
        p.int_in(0, 1_000_000),
        0,
        "embedded mode: clients connected at once; one more is closed as soon as it connects. 0: as many "
        "as the open-file hard limit (ulimit -Hn) holds beside the descriptors the bridge needs otherwise",
    ),
    "broker.connect_timeout": Setting(
        p.duration_in(0.1, 3600),
        10.0,
        "embedded mode: time a new connection has to send its CONNECT before it is closed",
        example="10s",
    ),
    "broker.max_inflight": Setting(
        p.int_in(1, 65535),
        32,
        "embedded mode: QoS 1/2 messages sent to a client and not yet acknowledged, per session; more "
        "wait in its queue, in order",
    ),
    # -- the embedded broker's listeners and anonymous access (docs/security.md) ------
    "broker.allow_anonymous": Setting(
        p.parse_bool,
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
        p.int_in(0, 100_000_000),
        100_000,
        "embedded mode: QoS 1/2 messages queued per session (offline, or behind its in-flight window); "
        "when full the oldest is dropped and counted; 0: no count limit",
    ),
    "broker.max_offline_bytes": Setting(
        p.size_in(1 << 10, 1 << 40),
        64 << 20,
        "embedded mode: bytes of messages queued per session (topic, payload and about 200 bytes of "
        "bookkeeping each); when full the oldest message is dropped and counted",
        example="64MB",
    ),
    "broker.max_queued_bytes": Setting(
        p.size_in(1 << 20, 1 << 40),
        4 << 30,
        "embedded mode: bytes of messages queued in all sessions together, counted as "
        "broker.max_offline_bytes counts them; when over it the oldest messages of the largest queues "
        "are dropped and counted (queued_bytes) until it holds again. Messages in flight (sent, not yet "
        "acknowledged) are not counted and never dropped. Plan for up to twice it in memory with small "
        "messages (docs/operations.md, memory of the embedded broker); no value means unlimited, 1TB is the "
        "largest",
        example="4GB",
    ),
    "broker.max_subscriptions": Setting(
        p.int_in(0, 1_000_000),
        1000,
        "embedded mode: topic filters one session may hold; a SUBSCRIBE beyond it is refused for that "
        "filter; 0: no limit",
    ),
    "broker.max_subscribe_filters": Setting(
        p.int_in(0, 1_000_000),
        1000,
        "embedded mode: distinct topic filters one SUBSCRIBE packet may carry (a filter repeated in the "
        "packet counts once and is subscribed once, with its last options); the filters past it are refused "
        "(SUBACK 0x80, or 0x97 quota exceeded for MQTT 5), the others granted; 0: no limit",
    ),
    "broker.max_subscribe_entries": Setting(
        p.int_in(0, 1_000_000),
        10_000,
        "embedded mode: topic filters one SUBSCRIBE or UNSUBSCRIBE packet may carry, repeats included; the "
        "broker refuses a packet with more as soon as it reads the filter past it, before decoding the rest "
        "(connection closed, MQTT 5: DISCONNECT 0x95, counted as subscribe_entries); 0: no limit but "
        "broker.max_packet_size",
    ),
    "broker.max_topic_levels": Setting(
        p.int_in(1, 65535),
        64,
        'embedded mode: levels of a topic or filter ("a/b/c" has 3); a PUBLISH with more closes the '
        "connection, a SUBSCRIBE filter with more is refused",
    ),
    "broker.max_clientid_len": Setting(
        p.int_in(23, 65535),
        256,
        "embedded mode: longest client id, in UTF-8 bytes; a longer one is refused at CONNECT",
    ),
    "broker.max_user_properties": Setting(
        p.int_in(0, 1_000_000),
        1024,
        "embedded mode: MQTT 5 user properties one packet (or its will) may carry; more closes the "
        "connection (reason 0x95, counted as user_properties); 0: no limit but broker.max_packet_size",
    ),
    "broker.max_output_bytes": Setting(
        p.size_in(1 << 10, 1 << 30),
        4 << 20,
        "embedded mode: bytes sent to a client and not yet read by it; above this, delivery to that "
        "client pauses and its messages wait in its queue (the publishers are not slowed), and the broker "
        "stops reading from that client until it reads (counted in hookbridge_broker_output_paused_total)",
        example="4MB",
    ),
    "broker.server_keep_alive": Setting(
        p.int_in(0, 65535),
        0,
        "embedded mode: seconds; above 0, MQTT 5 clients asking for a longer keepalive (or none) are "
        "told this one and held to it; 0: each client's own keepalive",
    ),
    # -- the embedded broker's users (docs/security.md; bridge/brokers/embedded/auth/) --
    "broker.auth.password_file": Setting(
        password_file,
        "",
        "embedded mode: users and passwords in Mosquitto's password file format ($7$ PBKDF2-SHA512 or $6$ "
        "SHA-512, as `mosquitto_passwd` writes them), e.g. `etc/passwd`; read again on SIGHUP",
    ),
    "broker.auth.backend": Setting(
        user_backend_setting,
        "",
        "embedded mode: the pool whose database holds the users (Redis hash `mqtt_user:<username>`, "
        "PostgreSQL table / MongoDB collection `mqtt_user`), e.g. `redis.pool1`; lookups are cached for 30 s",
        pool_ref=True,
    ),
    "broker.auth.password_hash": Setting(
        password_hash,
        "sha256",
        "embedded mode: how the database's `password` field was made from the password and its `salt` "
        "field, as EMQX 4 (`salt,sha256`: salt before the password, `sha256,salt`: after it)",
    ),
    # -- who may publish and subscribe (docs/security.md; the embedded broker) ----------------------
    "broker.acl.file": Setting(
        p.parse_str,
        "",
        "embedded mode: ACL file in Mosquitto's `acl_file` format (`user`, `topic`, `pattern` with %c "
        "and %u); reloaded on SIGHUP",
        example="etc/acl",
    ),
    "broker.acl.backend": Setting(
        user_backend_setting,
        "",
        "embedded mode: the ACL in a database, in EMQX 4's layout (Redis `mqtt_acl:<username>` hashes, "
        "table or collection `mqtt_acl`); read once per login, cached for 30 s",
        example="redis.pool1",
        pool_ref=True,
    ),
    "broker.acl.nomatch": Setting(
        p.enum_of("allow", "deny"),
        "deny",
        "embedded mode: what a publish or subscribe no ACL entry matches gets (`$SYS` topics are "
        "readable only where an entry allows them)",
    ),
    "broker.takeover": Setting(
        p.enum_of("any", "same_user"),
        None,
        "embedded mode: `same_user`: a CONNECT with the client id of another user's connection or session is "
        "refused; `any`: it takes the session over. Default: `same_user` when `broker.auth.*` is set, else `any`",
    ),
    "broker.sys_interval": Setting(
        p.duration_in(0, 86400),
        10.0,
        "embedded mode: the broker's status is published, retained, to `$SYS/broker/...` (Mosquitto's names: "
        "clients/connected, messages/received, load/messages/received/1min, ...) every this interval; "
        "0: never. Clients read it as the ACL allows (a subscription to `$SYS/#`)",
        example="10s",
    ),
    "broker.bans_file": Setting(
        p.described("a file in a writable or creatable directory; empty: bans are not kept", bans_file),
        "data/bans.json",
        "embedded mode: where the banned list (client ids, user names, addresses; the API's `/bans`) is kept "
        "across restarts, relative to the working directory; empty: in memory only, gone at a restart",
    ),
    "broker.durable_sessions": Setting(
        p.parse_bool,
        False,
        "embedded mode: keep every session with expiry > 0 (3.1.1: clean session 0), its subscriptions, queued "
        "and in-flight messages, its will, and the retained messages on disk, so they survive a restart and a "
        '`kill -9` (docs/brokers.md, "Durable sessions")',
    ),
    "broker.durable_commit_interval": Setting(
        p.duration_in(0, 1),
        0.002,
        "embedded mode, durable sessions on: at most one commit per this interval (a commit holds everything "
        "that happened since the last; a publisher's PUBACK waits for it). Shorter: lower latency; longer: fewer, "
        "larger commits",
        example="2ms",
    ),
    "broker.durable_preload": Setting(
        p.size_in(0, 1 << 40),
        64 << 20,
        "embedded mode, durable sessions on: at start, the restored sessions' queues are read into memory in "
        "one pass over the store when together they are at most this size (counted as "
        "broker.max_offline_bytes counts them; they count toward broker.max_queued_bytes too, so at most "
        "half of it is used), as Mosquitto reads its database at start: a fleet reconnecting after a restart "
        "finds its queues in memory. Larger: each session's queue is read back when it is first needed; "
        "0: always so",
        example="64MB",
    ),
    "broker.durable_min_free": Setting(
        p.size_in(0, 1 << 50),
        64 << 20,
        "embedded mode, durable sessions on: /healthz answers 503 (not ready) while the disk holding "
        "`broker.durable_dir` has less free space than this, before the store's commits start failing "
        "(a failed commit turns it 503 too); 0: only failed commits count",
        example="64MB",
    ),
    "broker.durable_dir": Setting(
        p.writable_dir,
        "data/durable",
        "embedded mode, durable sessions on: the directory of the store (`durable.db`, SQLite in WAL mode); "
        "relative to the working directory",
    ),
}
