"""Redis pool `type`: single (one server), sentinel (the Sentinels' addresses and a master name) or
cluster (seed nodes, database 0), checked together at the place of the key that is wrong; EMQX
4.4's Sentinel and Cluster pools import as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.cli import main
from bridge.conf.config import parse_config
from bridge.conf.errors import ConfErrors

BASE = "node.name = t@127.0.0.1\nbroker.listener.tcp = 127.0.0.1:0\nmetrics.listener = off\n"


def _errors(pool: str) -> list[str]:
    with pytest.raises(ConfErrors) as caught:
        parse_config("bridge.conf", BASE + pool)
    return [str(e) for e in caught.value.errors]


def test_sentinel_pool_parses() -> None:
    config = parse_config(
        "bridge.conf",
        BASE + "backend.redis.pool1.type = sentinel\n"
        "backend.redis.pool1.server = 127.0.0.1:26379, 127.0.0.2:26379\n"
        "backend.redis.pool1.sentinel = mymaster\nbackend.redis.pool1.wait_replicas = 1\n",
    )
    pool = config.pools["redis.pool1"]
    assert pool["server"] == [("127.0.0.1", 26379), ("127.0.0.2", 26379)]
    assert (pool["type"], pool["sentinel"], pool["wait_replicas"]) == ("sentinel", "mymaster", 1)


def test_single_keeps_one_address() -> None:
    config = parse_config("bridge.conf", BASE + "backend.redis.pool1.server = 10.0.0.1:6380\n")
    assert config.pools["redis.pool1"]["server"] == ("10.0.0.1", 6380)
    assert config.pools["redis.pool1"]["type"] == "single"


def test_settings_that_do_not_go_together() -> None:
    assert _errors("backend.redis.pool1.server = 127.0.0.1:1, 127.0.0.1:2\n") == [
        "bridge.conf:4:30: backend.redis.pool1.server: a single Redis takes one host:port "
        "(several are Sentinels: type = sentinel)"
    ]
    assert _errors("backend.redis.pool1.type = sentinel\n") == [
        "bridge.conf:4:28: backend.redis.pool1.type: a sentinel pool needs `sentinel`, the master name "
        "its Sentinels monitor"
    ]
    assert _errors("backend.redis.pool1.sentinel = mymaster\n") == [
        "bridge.conf:4:32: backend.redis.pool1.sentinel: `sentinel` applies to type = sentinel only"
    ]
    assert _errors("backend.redis.pool1.type = cluster\nbackend.redis.pool1.database = 2\n") == [
        "bridge.conf:5:32: backend.redis.pool1.database: a Redis Cluster has database 0 only"
    ]
    assert _errors("backend.redis.pool1.type = cluster\nbackend.redis.pool1.sentinel = m\n") == [
        "bridge.conf:5:32: backend.redis.pool1.sentinel: `sentinel` applies to type = sentinel only"
    ]
    assert _errors("backend.redis.pool1.type = galaxy\n")[0].startswith("bridge.conf:4:28: ")


def test_cluster_pool_parses_its_seed_nodes() -> None:
    config = parse_config(
        "bridge.conf",
        BASE + "backend.redis.pool1.type = cluster\n"
        "backend.redis.pool1.server = 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002\n"
        "backend.redis.pool1.wait_replicas = 1\n",
    )
    pool = config.pools["redis.pool1"]
    assert pool["server"] == [("127.0.0.1", 7000), ("127.0.0.1", 7001), ("127.0.0.1", 7002)]
    one_seed = parse_config(
        "bridge.conf", BASE + "backend.redis.pool1.type = cluster\nbackend.redis.pool1.server = 10.0.0.1:7000\n"
    )
    assert one_seed.pools["redis.pool1"]["server"] == ("10.0.0.1", 7000)


EMQX_SENTINEL = """\
backend.redis.pool1.type = sentinel
backend.redis.pool1.server = 127.0.0.1:26378,127.0.0.1:26379
backend.redis.pool1.sentinel = mymaster
backend.redis.pool1.pool_size = 8
backend.redis.pool1.database = 1
backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}, "pool": "pool1"}
"""


def test_emqx_sentinel_pool_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "emqx_backend_redis.conf").write_text(EMQX_SENTINEL)
    assert main(["import-emqx", str(tmp_path), "--out", "out"]) == 0
    config = (tmp_path / "out" / "config" / "bridge.conf").read_text()
    assert (
        "backend.redis.pool1.type = sentinel\nbackend.redis.pool1.server = 127.0.0.1:26378,127.0.0.1:26379\n" in config
    )
    assert main(["check", "-c", "out/config/bridge.conf", "-r", "out/rules"]) == 0


EMQX_CLUSTER = """\
backend.redis.pool1.type = cluster
backend.redis.pool1.server = 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
backend.redis.pool1.pool_size = 8
backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}, "pool": "pool1"}
"""


def test_emqx_cluster_pool_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "emqx_backend_redis.conf").write_text(EMQX_CLUSTER)
    assert main(["import-emqx", str(tmp_path), "--out", "out"]) == 0
    config = (tmp_path / "out" / "config" / "bridge.conf").read_text()
    assert (
        "backend.redis.pool1.type = cluster\n"
        "backend.redis.pool1.server = 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002\n" in config
    )
    assert main(["check", "-c", "out/config/bridge.conf", "-r", "out/rules"]) == 0
