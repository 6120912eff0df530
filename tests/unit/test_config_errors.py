"""Config validation: every key checked, every problem at once, secrets never shown."""

from __future__ import annotations

import pytest

from bridge.conf.config import parse_config
from bridge.conf.errors import ConfErrors

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
        "backend.mysql.pool1.server = 127.0.0.1:3306\n"
        "metrics.listener = 127.0.0.1\n"
        "broker.mode = mqtt\n"
        "backend.redis.hook.client.connected.1 = {}\n"
    )
    assert errors_of(text) == [
        f"{P}:1:1: unknown key node.nmae (did you mean node.name?)",
        f"{P}:2:15: broker.mode: expected one of embedded, emqx, mqtt, got 'embeded'",
        f"{P}:3:33: backend.redis.pool1.pool_size: expected an integer from 1 to 1024, got 'many'",
        f"{P}:4:1: unknown redis pool setting 'sever' (did you mean server?)",
        f"{P}:5:1: unknown backend 'mysql' (did you mean pgsql?) in backend.mysql.pool1.server",
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
