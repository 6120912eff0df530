"""Config validation: every key checked, every problem at once, secrets never shown."""

from __future__ import annotations

import os
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest

from bridge.brokers.embedded.limits import Limits
from bridge.conf.config import parse_config
from bridge.conf.errors import ConfErrors
from bridge.conf.schema import global_settings

P = "config/bridge.conf"


def errors_of(text: str) -> list[str]:
    with pytest.raises(ConfErrors) as caught:
        parse_config(P, text)
    return [str(e) for e in caught.value.errors]


def test_defaults_and_types() -> None:
    config = parse_config(
        P,
        "backend.redis.pool1.server = 10.0.0.1:6380\nbackend.redis.pool1.batch_time = 20ms\n"
        "spool.max_bytes = 64MB # comment\n",
    )
    pool = config.pools["redis.pool1"]
    assert pool["server"] == ("10.0.0.1", 6380)
    assert pool["batch_time"] == pytest.approx(0.02)
    assert pool["pool_size"] == 8
    assert config["spool.max_bytes"] == 64 << 20
    assert config["broker.mode"] == "embedded"


def test_every_error_at_once_with_positions() -> None:
    text = (
        "node.nmae = x\n"
        "broker.mode = embeded\n"
        "backend.redis.pool1.pool_size = many\n"
        "backend.redis.pool1.sever = 127.0.0.1:6379\n"
        "backend.mssql.pool1.server = 127.0.0.1:1433\n"
        "metrics.listener = 127.0.0.1\n"
        "broker.mode = mqtt\n"
        "backend.redis.hook.client.connected.1 = {}\n"
    )
    assert errors_of(text) == [
        f"{P}:1:1: unknown key node.nmae (did you mean node.name?)",
        f"{P}:2:15: broker.mode: expected one of embedded, emqx, mqtt, got 'embeded'",
        f"{P}:3:33: backend.redis.pool1.pool_size: expected an integer from 1 to 1024, got 'many'",
        f"{P}:4:1: unknown redis pool setting 'sever' (did you mean server?)",
        f"{P}:5:1: unknown backend 'mssql' (did you mean mysql?) in backend.mssql.pool1.server",
        f"{P}:6:20: metrics.listener: expected host:port, got '127.0.0.1'",
        f"{P}:7:1: duplicate key broker.mode (first set at line 2)",
        f"{P}:8:1: hook lines belong in rules/*.conf, not in the config file",
    ]


def test_env_substitution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HB_PORT", "6390")
    config = parse_config(
        P, "backend.redis.pool1.server = 127.0.0.1:${HB_PORT}\nbackend.redis.pool1.database = ${HB_DB:-3}\n"
    )
    assert config.pools["redis.pool1"]["server"] == ("127.0.0.1", 6390)
    assert config.pools["redis.pool1"]["database"] == 3
    monkeypatch.delenv("HB_MISSING", raising=False)
    assert errors_of("node.name = ${HB_MISSING}\n") == [
        f"{P}:1:13: environment variable HB_MISSING is not set (use ${{HB_MISSING:-default}})"
    ]


def test_secret_never_in_errors_or_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HB_SECRET", "hunter2")
    config = parse_config(P, "backend.redis.pool1.password = ${HB_SECRET}\n")
    assert config.secrets == ["hunter2"]
    assert "hunter2" not in repr(config)
    assert "hunter2" not in repr(config.pools["redis.pool1"])


# docs/architecture.md#bad-input: every value `run` (or a driver) would refuse is refused by `check`, pinned here.
VALUE_CASES = [
    ("broker.listener.tcp = [::1", "1:23: broker.listener.tcp: expected [IPv6 address]:port, got '[::1'"),
    (
        "broker.listener.tcp = ::1:1883",
        "1:23: broker.listener.tcp: an IPv6 address goes in brackets, as [::1]:1883, got '::1:1883'",
    ),
    ("broker.listener.tcp = [::1]", "1:23: broker.listener.tcp: expected [IPv6 address]:port, got '[::1]'"),
    ("broker.listener.tcp = [::g]:1883", "1:23: broker.listener.tcp: bad IPv6 address '::g'"),
    (
        "broker.listener.tcp = [127.0.0.1]:1883",
        "1:23: broker.listener.tcp: brackets are for an IPv6 address, got '[127.0.0.1]:1883'",
    ),
    ("broker.listener.tcp = 127.0.0.1:", "1:23: broker.listener.tcp: expected a port number after the host, got ''"),
    ("broker.listener.tcp = 127.0.0.1:70000", "1:23: broker.listener.tcp: port 70000 is out of range (0 to 65535)"),
    ("broker.listener.tcp = 300.1.1.1:1883", "1:23: broker.listener.tcp: bad IPv4 address '300.1.1.1'"),
    ("broker.listener.tcp = my host:1883", "1:23: broker.listener.tcp: bad host name 'my host'"),
    ("broker.server = 127.0.0.1:0", "1:17: broker.server: port 0 is out of range (1 to 65535)"),
    (
        "broker.max_offline_messages = -1",
        "1:31: broker.max_offline_messages: expected an integer from 0 to 100000000, got '-1'",
    ),
    # the embedded broker's limits (docs/brokers.md#limits)
    (
        "broker.max_packet_size = 268435461",
        "1:26: broker.max_packet_size: expected a size from 128B to 268435460B, got '268435461'",
    ),
    (
        "broker.max_packet_size = 1GB",
        "1:26: broker.max_packet_size: expected a size from 128B to 268435460B, got '1GB'",
    ),
    ("broker.max_connections = -1", "1:26: broker.max_connections: expected an integer from 0 to 1000000, got '-1'"),
    ("broker.connect_timeout = 0s", "1:26: broker.connect_timeout: expected a duration from 100ms to 1h, got '0s'"),
    ("broker.connect_timeout = 2h", "1:26: broker.connect_timeout: expected a duration from 100ms to 1h, got '2h'"),
    ("broker.max_inflight = 0", "1:23: broker.max_inflight: expected an integer from 1 to 65535, got '0'"),
    ("broker.max_inflight = 65536", "1:23: broker.max_inflight: expected an integer from 1 to 65535, got '65536'"),
    ("broker.max_offline_bytes = 0", "1:28: broker.max_offline_bytes: expected a size from 1KB to 1TB, got '0'"),
    (
        "broker.max_offline_bytes = 64 MiB",
        "1:28: broker.max_offline_bytes: expected a size from 1KB to 1TB such as 64MB, got '64 MiB'",
    ),
    (
        "broker.max_subscriptions = -1",
        "1:28: broker.max_subscriptions: expected an integer from 0 to 1000000, got '-1'",
    ),
    (
        "broker.max_subscribe_filters = 1000001",
        "1:32: broker.max_subscribe_filters: expected an integer from 0 to 1000000, got '1000001'",
    ),
    ("broker.max_topic_levels = 0", "1:27: broker.max_topic_levels: expected an integer from 1 to 65535, got '0'"),
    (
        "broker.max_clientid_len = 22",
        "1:27: broker.max_clientid_len: expected an integer from 23 to 65535, got '22'",
    ),
    ("broker.max_output_bytes = 2GB", "1:27: broker.max_output_bytes: expected a size from 1KB to 1GB, got '2GB'"),
    # no value means "unlimited" (docs/brokers.md, Limits): 0 is refused like any size under 1MB
    ("broker.max_queued_bytes = 0", "1:27: broker.max_queued_bytes: expected a size from 1MB to 1TB, got '0'"),
    ("broker.max_queued_bytes = 2TB", "1:27: broker.max_queued_bytes: expected a size from 1MB to 1TB, got '2TB'"),
    (
        "broker.server_keep_alive = 65536",
        "1:28: broker.server_keep_alive: expected an integer from 0 to 65535, got '65536'",
    ),
    (
        "backend.redis.pool1.database = -1",
        "1:32: backend.redis.pool1.database: expected an integer from 0 to 2147483647, got '-1'",
    ),
    ("spool.dir = /etc/passwd", "1:13: spool.dir: /etc/passwd exists and is not a directory"),
    (
        "spool.dir = /etc/passwd/spool",
        "1:13: spool.dir: cannot create /etc/passwd/spool: /etc/passwd is not a directory",
    ),
    (
        "backend.redis.pool1.queue_size = -5",
        "1:34: backend.redis.pool1.queue_size: expected an integer from 1 to 100000000, got '-5'",
    ),
    (
        "backend.redis.pool1.batch_size = 0",
        "1:34: backend.redis.pool1.batch_size: expected an integer from 1 to 100000, got '0'",
    ),
    (
        "backend.redis.pool1.pool_size = 1e29",
        "1:33: backend.redis.pool1.pool_size: expected an integer from 1 to 1024, got '1e29'",
    ),
    (
        "backend.redis.pool1.pool_size = 100000000000000000000000000000",
        "1:33: backend.redis.pool1.pool_size: expected an integer from 1 to 1024, got '100000000000000000000000000000'",
    ),
    ('node.name = "a\\u0000b"', "1:13: node.name: contains the control character U+0000"),
    ('node.name = "a\\u001bb"', "1:13: node.name: contains the control character U+001B"),
    ('node.name = "\\ud800"', "1:13: node.name: contains an unpaired surrogate U+D800"),
    ('node.name = ""', "1:13: node.name: must not be empty"),
    (
        "backend.redis.pool1.max_inflight = 0",
        "1:36: backend.redis.pool1.max_inflight: expected an integer from 1 to 256, got '0'",
    ),
    (
        "backend.redis.pool1.retry_backoff_max = 0",
        "1:41: backend.redis.pool1.retry_backoff_max: expected a duration from 10ms to 1h, got '0'",
    ),
    (
        "backend.redis.pool1.trim_interval = 0s",
        "1:37: backend.redis.pool1.trim_interval: expected a duration from 100ms to 1d, got '0s'",
    ),
    (
        "backend.redis.pool1.batch_time = 2h",
        "1:34: backend.redis.pool1.batch_time: expected a duration from 0s to 1m, got '2h'",
    ),
    (
        "broker.session_expiry = 200000d",
        "1:25: broker.session_expiry: expected a duration from 0s to 4294967295s, got '200000d'",
    ),
    (
        "broker.receive_maximum = 65536",
        "1:26: broker.receive_maximum: expected an integer from 1 to 65535, got '65536'",
    ),
    ("spool.max_bytes = 0", "1:19: spool.max_bytes: expected a size from 64KB to 16TB, got '0'"),
    (
        "spool.max_bytes = 99999999999TB",
        "1:19: spool.max_bytes: expected a size from 64KB to 16TB, got '99999999999TB'",
    ),
    (
        "backend.cassa.pool1.concurrency = 0",
        "1:35: backend.cassa.pool1.concurrency: expected an integer from 1 to 32768, got '0'",
    ),
    ("backend.cassa.pool1.nodes = ,", "1:29: backend.cassa.pool1.nodes: expected at least one host:port"),
    (
        'backend.cassa.pool1.replication = {"class": "SimpleStrategy", "replication_factor": 0}',
        "1:35: backend.cassa.pool1.replication: replication factor of 'replication_factor' must be a whole number from 1 to 100",
    ),
    (
        "backend.cassa.pool1.replication = " + "[" * 40 + "]" * 40,
        "1:35: backend.cassa.pool1.replication: bad JSON: nested deeper than 32 levels",
    ),
    ("backend.mongo.pool1.database = my.db", "1:32: backend.mongo.pool1.database: must not contain '.'"),
    ("backend.pgsql.pool1.database = ", "1:32: backend.pgsql.pool1.database: must not be empty"),
    ("broker.shared_group = a/b", "1:23: broker.shared_group: must not contain '/'"),
    (
        "broker.emqx.event_topic = a/#/b",
        "1:27: broker.emqx.event_topic: bad topic filter 'a/#/b': '#' must be a whole level and the last one",
    ),
    (
        "broker.emqx.api = ftp://host",
        "1:19: broker.emqx.api: expected a URL such as http://127.0.0.1:18083, got 'ftp://host'",
    ),
]


@pytest.mark.parametrize(("line", "expected"), VALUE_CASES)
def test_value_run_would_refuse_is_pinned(line: str, expected: str) -> None:
    assert errors_of(line + "\n") == [f"{P}:{expected}"]


def test_a_password_in_an_address_or_url_is_refused_without_echoing_it() -> None:
    text = (
        "backend.redis.pool1.server = redis://user:hunter2@127.0.0.1:6379\n"
        "broker.server = user:hunter2@127.0.0.1:1883\n"
        "broker.emqx.api = http://key:hunter2@127.0.0.1:18083\n"
    )
    assert errors_of(text) == [
        f"{P}:1:30: backend.redis.pool1.server: expected host:port, not a URL or user@host "
        "(a password goes in its own secret setting)",
        f"{P}:2:17: broker.server: expected host:port, not a URL or user@host (a password goes in its own secret setting)",
        f"{P}:3:19: broker.emqx.api: the URL must not hold a user or password (use the api_key and api_secret settings)",
    ]


def test_a_control_character_in_a_secret_is_named_not_shown() -> None:
    assert errors_of('backend.redis.pool1.password = "hunter2\\u0007"\n') == [
        f"{P}:1:32: backend.redis.pool1.password: contains the control character U+0007"
    ]


def test_values_at_their_limits_are_accepted(tmp_path: Path) -> None:
    config = parse_config(
        P,
        "broker.listener.tcp = [::1]:0\nbroker.max_offline_messages = 0\nbroker.server = [fe80::1%eth0]:1883\n"
        f"spool.dir = {tmp_path}/new/spool\nmetrics.listener = off\nbackend.redis.pool1.server = redis-1.local:65535\n"
        "backend.redis.pool1.database = 0\nbackend.redis.pool1.pool_size = 1024\nbackend.redis.pool1.batch_time = 0\n"
        'backend.mongo.pool1.server = "a:1, [::1]:2"\n'
        'backend.cassa.pool1.replication = {"class": "NetworkTopologyStrategy", "dc1": 3, "dc2": "2"}\n',
    )
    assert config["broker.listener.tcp"] == ("::1", 0)
    assert config["broker.max_offline_messages"] == 0
    assert config["broker.server"] == ("fe80::1%eth0", 1883)
    assert config["metrics.listener"] is None
    assert config.pools["redis.pool1"]["server"] == ("redis-1.local", 65535)
    assert config.pools["redis.pool1"]["batch_time"] == 0
    assert config.pools["mongo.pool1"]["server"] == [("a", 1), ("::1", 2)]
    assert not (tmp_path / "new").exists()  # check creates nothing


def test_spool_dir_that_cannot_be_written(tmp_path: Path) -> None:
    """Not writable: a mode without w for a user; for root (who may write anywhere else, as CI
    runs) a read-only filesystem."""
    if os.geteuid() != 0:
        tmp_path.chmod(0o500)
        try:
            assert errors_of(f"spool.dir = {tmp_path}/spool\n") == [f"{P}:1:13: spool.dir: cannot write to {tmp_path}"]
        finally:
            tmp_path.chmod(0o700)
        return
    readonly = tmp_path / "ro"
    readonly.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(readonly)], check=True)
    try:
        assert errors_of(f"spool.dir = {readonly}/spool\n") == [f"{P}:1:13: spool.dir: cannot write to {readonly}"]
    finally:
        subprocess.run(["umount", str(readonly)], check=True)


def test_every_broker_limit_is_a_setting_with_the_limits_default() -> None:
    """Limits is the broker's contract; its settings carry the same names and defaults."""
    limit_fields = {field.name: field.default for field in fields(Limits)}
    settings = {key.removeprefix("broker."): global_settings()[f"broker.{key}"].default for key in limit_fields}
    assert settings == limit_fields
    assert Limits.from_config(parse_config(P, "")) == Limits()


def test_limits_come_from_the_settings_at_their_edges() -> None:
    config = parse_config(
        P,
        "broker.max_packet_size = 268435460\nbroker.max_connections = 1\nbroker.connect_timeout = 100ms\n"
        "broker.max_inflight = 65535\nbroker.max_offline_messages = 0\nbroker.max_offline_bytes = 1KB\n"
        "broker.max_queued_bytes = 1MB\n"
        "broker.max_subscriptions = 0\nbroker.max_subscribe_filters = 0\nbroker.max_topic_levels = 1\n"
        "broker.max_clientid_len = 23\n"
        "broker.max_output_bytes = 1GB\nbroker.server_keep_alive = 65535\n",
    )
    assert Limits.from_config(config) == Limits(
        max_packet_size=268_435_460,
        max_connections=1,
        connect_timeout=0.1,
        max_inflight=65535,
        max_offline_messages=0,
        max_offline_bytes=1024,
        max_queued_bytes=1 << 20,
        max_subscriptions=0,
        max_subscribe_filters=0,
        max_topic_levels=1,
        max_clientid_len=23,
        max_output_bytes=1 << 30,
        server_keep_alive=65535,
    )
