"""docs/migrate-from-emqx44.md's step by step (A: the embedded broker), run as written: the `$ `
lines of its first console block, in a directory holding EMQX 4.4's etc/ (the Redis backend file
of tests/fixtures/emqx44, pointed at this test's Redis) and data written as EMQX 4.4 writes it.
The `hookbridge run` line is started in-process from the same paths, and a returning subscriber,
a new subscriber and the proxy subscription are checked against it."""

from __future__ import annotations

import asyncio
import functools
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from bridge.app import Bridge, Paths
from support.bridges import mqtt_port
from support.mqtt import Client
from support.services import ROOT, start_redis, stop_redis
from tests.integration.test_migrate_emqx44 import write_as_emqx44

GUIDE = ROOT / "docs" / "migrate-from-emqx44.md"
OWN_REDIS_PORT = 6458


def guide_commands() -> list[str]:
    block = GUIDE.read_text().split("```console\n", 1)[1].split("```", 1)[0]
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


@pytest.fixture(scope="module")
def redis_port() -> Iterator[int]:
    """Overrides conftest's: this module's own Redis (the migration walks the whole keyspace)."""
    start_redis(OWN_REDIS_PORT)
    yield OWN_REDIS_PORT
    stop_redis(OWN_REDIS_PORT)


async def test_the_guide_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_db: redis_sync.Redis, redis_port: int
) -> None:
    plugins = tmp_path / "emqx" / "etc" / "plugins"
    plugins.mkdir(parents=True)
    source = (ROOT / "tests" / "fixtures" / "emqx44" / "etc" / "plugins" / "emqx_backend_redis.conf").read_text()
    (plugins / "emqx_backend_redis.conf").write_text(
        source.replace("server = 127.0.0.1:6379", f"server = 127.0.0.1:{redis_port}")
    )
    write_as_emqx44(redis_db)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "HOOKBRIDGE_MQTT_LISTEN": "127.0.0.1:0",
        "HOOKBRIDGE_METRICS_LISTEN": "off",
    }
    commands = guide_commands()
    assert commands[-1] == "hookbridge run -c hb/config/bridge.conf -r hb/rules"
    outputs = []
    for command in commands[:-1]:
        done = await asyncio.to_thread(
            subprocess.run, shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{command}: {done.stderr}"
        outputs.append(done.stdout)
    assert "mqtt:retain:<topic>: 2 emqx_base62 of the decimal text (EMQX 3.x/4.x), 1 positional base62" in outputs[2]
    assert "would move 4 stored message ids, 3 retained messages, 1 pubsub offsets" in outputs[2]
    assert "moved 4 stored message ids" in outputs[3]
    assert "moved 0 stored message ids, 0 retained messages, 0 pubsub offsets" in outputs[4]  # twice: nothing

    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        if name.startswith("HOOKBRIDGE_"):
            monkeypatch.setenv(name, value)
    bridge = Bridge.load(Paths(tmp_path / "hb" / "config" / "bridge.conf", tmp_path / "hb" / "rules"))
    await bridge.start()
    try:
        port = mqtt_port(bridge)
        publisher = await Client(port, "hb-pub").connected()
        await publisher.publish("pubsub/t", b"h4", qos=1)
        await bridge.idle()
        dev1 = await Client(port, "dev1", clean=False).connected()
        await dev1.subscribe("pubsub/t", qos=1)
        assert [m.payload for m in await dev1.expect(3)] == [b"e2", b"e3", b"h4"]
        await publisher.publish("proxy/dev1", b"to-proxy", qos=1)
        assert [m.payload for m in await dev1.expect(1)] == [b"to-proxy"]
        fresh = await Client(port, "fresh").connected()
        await fresh.subscribe("status/#", qos=1)
        got = sorted(m.payload for m in await fresh.expect(3))  # one retained key in each of EMQX's forms
        assert got == [b"retained-by-emqx", b"retained-hash", b"retained-string"]
        for client in (dev1, fresh, publisher):
            await client.disconnect()
    finally:
        await bridge.stop(drain_timeout=5)


def test_the_guides_emqx_mode_config_checks_as_written(tmp_path: Path) -> None:
    """B and C: the config block replaces `broker.mode = embedded`, then the second console block
    (remove the fetch and lookup rules, check) runs as written."""
    text = GUIDE.read_text().split("## B and C", 1)[1]
    block = text.split("```\n", 1)[1].split("```", 1)[0]
    commands = [
        line[2:] for line in text.split("```console\n", 1)[1].split("```", 1)[0].splitlines() if line.startswith("$ ")
    ]
    plugins = tmp_path / "emqx" / "etc" / "plugins"
    plugins.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "fixtures" / "emqx44" / "etc" / "plugins" / "emqx_backend_redis.conf", plugins)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for name in ("EMQX_API_KEY", "EMQX_API_SECRET"):
        env.pop(name, None)
    run = functools.partial(subprocess.run, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run(["hookbridge", "import-emqx", "emqx/etc", "--out", "hb"]).returncode == 0
    conf = tmp_path / "hb" / "config" / "bridge.conf"
    assert "broker.mode = embedded\n" in conf.read_text()
    conf.write_text(conf.read_text().replace("broker.mode = embedded\n", block))
    refused = run(["hookbridge", "check", "-c", str(conf), "-r", "hb/rules"])
    assert refused.returncode != 0 and "on_message_fetch_for_pubsub needs deliver-to-session" in refused.stderr
    for command in commands:
        done = run(["bash", "-c", command])
        assert done.returncode == 0, f"{command}: {done.stderr}"
    rules = (tmp_path / "hb" / "rules" / "redis.conf").read_text()
    assert "on_client_connected" in rules and "on_subscribe_lookup" in rules and "on_message_fetch" not in rules
