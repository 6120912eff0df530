"""`hookbridge ctl` (bridge/ops/ctl.py, docs/operations.md#hookbridge-ctl-the-api-from-the-command-line) as an operator runs it: a separate process
against a real running bridge (the embedded broker, the shipped rules on the test Redis) with real
paho clients. Each command's output, and its effect on the broker and the clients."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync

from bridge.app import Bridge, Paths
from support.bridges import connected, core
from support.conf import config_text
from support.mqtt import V5, V311, Client
from support.services import ROOT

KEY = "ctl-k3y-for-the-tests-0123456789"
KEY_LINE = f"api.keys = ops:sha256:{hashlib.sha256(KEY.encode()).hexdigest()}\n"
ACL = "topic readwrite #\n\nuser limited\ntopic readwrite dev/#\n"


async def start_bridge(home: Path, redis_port: int, extra: str = "") -> Bridge:
    """A bridge with the API on (key KEY) and the HTTP listener on a free port; its config in home/bridge.conf."""
    (home / "rules").mkdir(parents=True)
    shutil.copytree(ROOT / "templates", home / "templates")
    shutil.copy(ROOT / "rules" / "redis.conf", home / "rules" / "redis.conf")
    (home / "acl").write_text(ACL)
    extra += f"spool.dir = {home / 'spool'}\ndeadletter.dir = {home / 'dl'}\napi.enabled = on\n{KEY_LINE}"
    extra += f"broker.acl.file = {home / 'acl'}\n"
    text = config_text(redis_port, extra).replace("metrics.listener = off\n", "metrics.listener = 127.0.0.1:0\n")
    (home / "bridge.conf").write_text(text)
    started = Bridge.load(Paths(home / "bridge.conf", home / "rules"))
    await started.start()
    return started


@pytest.fixture
async def bridge(tmp_path: Path, redis_port: int, redis_db: redis_sync.Redis) -> AsyncIterator[Bridge]:
    started = await start_bridge(tmp_path / "bridge", redis_port)
    yield started
    await started.stop(drain_timeout=5)


def url(bridge: Bridge) -> str:
    assert bridge.status is not None
    return f"http://127.0.0.1:{bridge.status.port}"


async def ctl(*args: str, key: str | None = KEY, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run `python -m bridge ctl ARGS` in its own process: (exit status, stdout, stderr)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBRIDGE_")}
    if key is not None:
        environment["HOOKBRIDGE_API_KEY"] = key
    environment.update(env or {})
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bridge",
        "ctl",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment,
        cwd=ROOT,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def ok(*args: str, **kwargs: Any) -> str:
    code, out, err = await ctl(*args, **kwargs)
    assert (code, err) == (0, ""), (args, code, err)
    return out


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines()]


async def test_clients_list_show_and_kick(bridge: Bridge, clients: list[Client]) -> None:
    base = url(bridge)
    await connected(bridge, clients, "dev-a", version=V5, user="limited")
    b = await connected(bridge, clients, "dev-b", version=V311)
    offline = await connected(bridge, clients, "off-1", version=V311, clean=False)
    assert await offline.subscribe("dev/#", 1) == [1]
    await offline.disconnect()

    table = rows(await ok("--url", base, "clients", "list"))
    assert table[0] == ["CLIENT", "ID", "USER", "CONNECTED", "PEER", "PROTO", "CLEAN", "SUBS"]
    assert [(r[0], r[1], r[2]) for r in table[1:]] == [
        ("dev-a", "limited", "yes"),
        ("dev-b", "-", "yes"),
        ("off-1", "-", "no"),
    ]
    listed = json.loads(await ok("--url", base, "clients", "list", "--json", "--disconnected"))
    assert [(c["clientid"], c["connected"], c["subscriptions"]) for c in listed] == [("off-1", False, 1)]
    listed = json.loads(await ok("--url", base, "--json", "clients", "list", "--prefix", "dev-", "--limit", "1"))
    assert [c["clientid"] for c in listed] == ["dev-a"]

    shown = await ok("--url", base, "clients", "show", "off-1")
    assert "queue" in shown and "0 messages" in shown and "dev/#" in shown

    out = await ok("--url", base, "clients", "kick", "dev-b")
    assert out.strip() == "kicked dev-b"
    await b.wait_disconnected()
    assert "dev-b" not in core(bridge).active
    code, out, err = await ctl("--url", base, "clients", "kick", "dev-b")  # a clean session: gone with it
    assert (code, out, err) == (1, "", "hookbridge ctl: DELETE /clients/dev-b: 404 no such client\n")
    code, out, err = await ctl("--url", base, "clients", "kick", "off-1")
    assert (code, out, err) == (
        1,
        "",
        "hookbridge ctl: DELETE /clients/off-1: 409 the client is not connected; its session stays (DELETE /api/v1/sessions/{clientid} removes it)\n",
    )


async def test_subscriptions_add_and_del(bridge: Bridge, clients: list[Client]) -> None:
    base = url(bridge)
    a = await connected(bridge, clients, "dev-a", version=V5, user="limited")
    pub = await connected(bridge, clients, "pub", version=V311)
    assert (await ok("--url", base, "subs", "add", "dev-a", "dev/+/state", "1")).strip() == (
        "subscribed dev-a to dev/+/state (qos 1)"
    )
    assert "dev/+/state" in core(bridge).states["dev-a"].subscriptions
    assert rows(await ok("--url", base, "subs", "list", "--client", "dev-a")) == [
        ["CLIENT", "ID", "FILTER", "QOS"],
        ["dev-a", "dev/+/state", "1"],
    ]
    assert await pub.publish("dev/7/state", b"on", 1) == 0
    got = await a.message()
    assert (got.topic, got.payload, got.qos) == ("dev/7/state", b"on", 1)
    # the client's ACL holds as for its own SUBSCRIBE
    code, _, err = await ctl("--url", base, "subs", "add", "dev-a", "other/#", "0")
    assert code == 1 and "403" in err and "ACL" in err
    assert (await ok("--url", base, "subs", "del", "dev-a", "dev/+/state")).strip() == (
        "unsubscribed dev-a from dev/+/state"
    )
    assert core(bridge).states["dev-a"].subscriptions == {}
    assert json.loads(await ok("--url", base, "--json", "subs", "list")) == []


async def test_publish_retained_status_and_json(bridge: Bridge, clients: list[Client], tmp_path: Path) -> None:
    base = url(bridge)
    sub = await connected(bridge, clients, "sub", version=V5)
    assert await sub.subscribe("dev/#", 1) == [1]
    out = await ok("--url", base, "publish", "dev/1/cfg", "ctl says hi", "--qos", "1", "--retain")
    assert out.strip() == "published to dev/1/cfg, routed to 1 sessions"
    got = await sub.message()
    assert (got.topic, got.payload, got.qos) == ("dev/1/cfg", b"ctl says hi", 1)
    await ok("--url", base, "publish", "dev/2/cfg", "two", "--retain")
    await sub.message()

    table = rows(await ok("--url", base, "retained", "list", "dev/#"))
    assert table[0] == ["TOPIC", "QOS", "BYTES", "FROM", "PAYLOAD"]
    assert table[1:] == [["dev/1/cfg", "1", "11", "-", "ctl", "says", "hi"], ["dev/2/cfg", "0", "3", "-", "two"]]
    listed = json.loads(await ok("--url", base, "retained", "list", "dev/1/#", "--json"))
    assert [(r["topic"], r["payload"]) for r in listed] == [("dev/1/cfg", "ctl says hi")]
    assert (await ok("--url", base, "retained", "del", "dev/2/cfg")).strip() == (
        "deleted the retained message on dev/2/cfg"
    )
    assert [r["topic"] for r in json.loads(await ok("--url", base, "--json", "retained", "list"))] == ["dev/1/cfg"]
    code, _, err = await ctl("--url", base, "retained", "del", "$SYS/broker/version")
    assert code == 1 and "403" in err and "$SYS" in err, err

    status = json.loads(await ok("--url", base, "--json", "status"))
    assert status["version"] and status["uptime"] >= 0
    text = await ok("--url", base, "status")
    assert text.startswith("version") and "pool1" in text
    # where the bridge is, from the config file's metrics.listener (port 0 there: the actual one
    # through HOOKBRIDGE_URL instead, as a script would set it)
    assert "version" in await ok("status", env={"HOOKBRIDGE_URL": base})
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    assert "version" in await ok("--url", base, "--key-file", str(key_file), "status", key=None)


async def test_errors_are_one_line(bridge: Bridge, tmp_path: Path) -> None:
    base = url(bridge)
    code, out, err = await ctl("--url", base, "status", key=None)
    assert (code, out) == (1, "")
    assert err == "hookbridge ctl: GET /status: 401 a valid API key is needed: Authorization: Bearer <key>\n"
    code, _, err = await ctl("--url", base, "status", key="wrong-key-0123456789")
    assert code == 1 and "401" in err
    code, _, err = await ctl("--url", "http://127.0.0.1:1", "status")
    assert code == 1 and err.startswith("hookbridge ctl: cannot reach the bridge at http://127.0.0.1:1/api/v1")
    code, _, err = await ctl("--url", base, "subs", "add", "dev-a", "a/#", "3")
    assert code == 2 and "QoS must be 0, 1 or 2" in err
    code, _, err = await ctl("-c", str(tmp_path / "missing.conf"), "status")
    assert code == 1 and err.count("\n") == 1 and "cannot read config" in err
    code, _, err = await ctl("--url", base, "retained", "list", "a/#/b")
    assert code == 1 and "400 bad topic filter" in err


async def test_https_listener_found_in_the_config_file(
    tmp_path: Path, redis_port: int, redis_db: redis_sync.Redis
) -> None:
    """No --url: the config's metrics.listener, https as its certfile says, the certificate checked."""
    from support.tls import make_certificates

    (tmp_path / "tls").mkdir()
    certs = make_certificates(tmp_path / "tls")
    tls = f"metrics.listener.certfile = {certs.cert}\nmetrics.listener.keyfile = {certs.key}\n"
    started = await start_bridge(tmp_path / "bridge", redis_port, tls)
    try:
        assert started.status is not None
        # the config as the operator's, with the port the bridge got (it asked for a free one)
        text = (tmp_path / "bridge" / "bridge.conf").read_text()
        config = tmp_path / "ctl.conf"
        config.write_text(
            text.replace("metrics.listener = 127.0.0.1:0", f"metrics.listener = 127.0.0.1:{started.status.port}")
        )
        out = await ok("-c", str(config), "--cafile", str(certs.ca), "--json", "status")
        assert json.loads(out)["broker"]["mode"] == "embedded"
        code, out, err = await ctl("-c", str(config), "status")  # the system's CAs do not know the test CA
        assert (code, out) == (1, "") and err.count("\n") == 1
        assert err.startswith(
            f"hookbridge ctl: cannot reach the bridge at https://127.0.0.1:{started.status.port}/api/v1: "
        )
        assert "CERTIFICATE_VERIFY_FAILED" in err
    finally:
        await started.stop(drain_timeout=5)


async def test_ctl_changes_things_without_a_key_in_anonymous_loopback_mode(
    tmp_path: Path, redis_port: int, redis_db: redis_sync.Redis, clients: list[Client]
) -> None:
    """ctl marks its requests (X-Hookbridge), so a change without a key passes the anonymous
    mode's rule that no other web page could meet (bridge/api/anonymous.py)."""
    started = await start_bridge(tmp_path / "bridge", redis_port, "api.allow_anonymous_loopback = on\n")
    try:
        base = url(started)
        b = await connected(started, clients, "dev-b", version=V311)
        assert (await ok("--url", base, "clients", "kick", "dev-b", key=None)).strip() == "kicked dev-b"
        await b.wait_disconnected()
        await ok("--url", base, "publish", "t/1", "x", "--retain", key=None)
        await ok("--url", base, "retained", "del", "t/1", key=None)
        await ok("--url", base, "reload", key=None)
    finally:
        await started.stop(drain_timeout=5)


async def test_client_ids_with_control_characters_and_slashes(bridge: Bridge, clients: list[Client]) -> None:
    """ctl percent-encodes an id in the path and shows what is not printable as an escape, never raw."""
    base = url(bridge)
    odd = "red\x1b[31m/%x y"
    client = await connected(bridge, clients, odd, version=V5)
    assert await client.subscribe("dev/#", 0) == [0]
    listed = await ok("--url", base, "clients", "list")
    assert "red\\x1b[31m/%x" in listed and "\x1b" not in listed
    shown = await ok("--url", base, "clients", "show", odd)
    assert "dev/#" in shown and "\x1b" not in shown
    out = await ok("--url", base, "clients", "kick", odd)
    assert out == "kicked red\\x1b[31m/%x y\n"
    await client.wait_disconnected()
    code, out, err = await ctl("--url", base, "clients", "show", odd)  # a clean session: gone
    assert (code, out) == (1, "") and "404 no such client" in err and "\x1b" not in err
