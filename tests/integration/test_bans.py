"""Bans (bridge/brokers/embedded/bans.py, docs/operations.md#bans) against a real bridge with real paho
clients: through the API, `hookbridge ctl` and the dashboard (headless Chromium). A paho client
with paho's default reconnect settings is closed when its ban is added, is refused (CONNACK 0x8A;
3.1.1: return code 5) at every retry, still after a restart of the bridge, and comes back by
itself once the ban is lifted."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import paho.mqtt.client as paho
import pytest
import redis as redis_sync
from paho.mqtt.enums import CallbackAPIVersion

from bridge.app import Bridge, Paths
from bridge.brokers.embedded.codec import MQTT_5
from support.bridges import core, eventually, mqtt_port
from support.cdp import browser
from support.conf import config_text
from support.mqtt import V5, V311, Client
from support.process import free_port
from support.services import ROOT
from tests.integration.test_ctl import ctl

KEY = "bans-k3y-for-the-tests-0123456789"
KEY_LINE = f"api.keys = ops:sha256:{hashlib.sha256(KEY.encode()).hexdigest()}\n"
TIMEOUT = 30.0


async def start_bridge(home: Path, redis_port: int) -> Bridge:
    """A bridge with the API on and its banned list in home/bans.json (the config is written once)."""
    if not (home / "bridge.conf").exists():
        (home / "rules").mkdir(parents=True)
        shutil.copytree(ROOT / "templates", home / "templates")
        (home / "rules" / "none.conf").write_text("")
        extra = f"spool.dir = {home / 'spool'}\ndeadletter.dir = {home / 'dl'}\napi.enabled = on\n{KEY_LINE}"
        extra += f"broker.bans_file = {home / 'bans.json'}\n"
        text = config_text(redis_port, extra).replace("metrics.listener = off\n", "metrics.listener = 127.0.0.1:0\n")
        # a fixed MQTT port, so a client retrying across a restart finds the new bridge where the old one was
        text = text.replace("broker.listener.tcp = 127.0.0.1:0\n", f"broker.listener.tcp = 127.0.0.1:{free_port()}\n")
        (home / "bridge.conf").write_text(text)
    started = Bridge.load(Paths(home / "bridge.conf", home / "rules"))
    await started.start()
    return started


class Bridges:
    def __init__(self, home: Path, redis_port: int) -> None:
        self.home, self.redis_port = home, redis_port
        self.running: Bridge | None = None

    async def start(self) -> Bridge:
        self.running = await start_bridge(self.home, self.redis_port)
        return self.running

    async def stop(self) -> None:
        if self.running is not None:
            await self.running.stop(drain_timeout=5)
            self.running = None


@pytest.fixture
async def bridges(tmp_path: Path, redis_port: int, redis_db: redis_sync.Redis) -> AsyncIterator[Bridges]:
    made = Bridges(tmp_path / "bridge", redis_port)
    yield made
    await made.stop()


def base(bridge: Bridge) -> str:
    assert bridge.status is not None
    return f"http://127.0.0.1:{bridge.status.port}"


async def call(bridge: Bridge, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, base(bridge) + "/api/v1" + path, json=body, headers=headers) as answer,
    ):
        return answer.status, await answer.json()


class Reconnecting:
    """A paho client as an application writes one: loop_start() and paho's default reconnect
    settings (reconnect_on_failure, a delay from 1 s doubling to 2 min). Every CONNACK it gets is
    recorded, in order."""

    def __init__(self, port: int, clientid: str, protocol: Any = paho.MQTTv5, username: str | None = None) -> None:
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=clientid, protocol=protocol)
        if username is not None:
            self.client.username_pw_set(username)
        self.connacks: list[int] = []
        self._changed = threading.Condition()
        self.client.on_connect = self._on_connect
        self.client.connect_async("127.0.0.1", port, keepalive=30)
        self.client.loop_start()

    def _on_connect(self, _c: Any, _u: Any, _flags: Any, reason: Any, _p: Any) -> None:
        with self._changed:
            self.connacks.append(int(reason.value))
            self._changed.notify_all()

    async def until(self, wanted: Callable[[list[int]], bool]) -> list[int]:
        """Wait (up to TIMEOUT) until the CONNACKs so far satisfy `wanted`."""

        def wait() -> list[int]:
            with self._changed:
                assert self._changed.wait_for(lambda: wanted(self.connacks), TIMEOUT), self.connacks
                return list(self.connacks)

        return await asyncio.to_thread(wait)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


async def test_a_banned_client_is_closed_and_stays_out_across_a_restart(bridges: Bridges) -> None:
    bridge = await bridges.start()
    device = Reconnecting(mqtt_port(bridge), "dev-bad")
    bystander = Reconnecting(mqtt_port(bridge), "dev-good")
    try:
        assert await device.until(lambda acks: acks == [0])
        assert await bystander.until(lambda acks: acks == [0])

        status, ban = await call(
            bridge, "POST", "/bans", {"as": "clientid", "who": "dev-bad", "duration": 3600, "reason": "flooding"}
        )
        assert status == 201, ban
        assert ban["kicked"] == ["dev-bad"] and ban["by"] == "ops" and ban["reason"] == "flooding"
        assert 3590 < ban["until"] - time.time() <= 3600
        # paho reconnects by itself (1 s, then 2 s): each CONNECT is refused with 0x8A "banned"
        acks = await device.until(lambda acks: len(acks) >= 3)
        assert acks[0] == 0 and set(acks[1:]) == {0x8A}, acks
        assert "dev-bad" not in core(bridge).active
        assert core(bridge).refused["banned"] >= 2
        assert bystander.connacks == [0] and "dev-good" in core(bridge).active  # the others stay

        status, listed = await call(bridge, "GET", "/bans")
        assert status == 200 and [(b["as"], b["who"]) for b in listed["data"]] == [("clientid", "dev-bad")]
        saved = json.loads((bridges.home / "bans.json").read_text())
        assert [(b["as"], b["who"], b["reason"]) for b in saved] == [("clientid", "dev-bad", "flooding")]

        # a restart keeps the ban: the device, still retrying, is still refused
        await bridges.stop()
        refused_before = len(device.connacks)
        bridge = await bridges.start()
        status, listed = await call(bridge, "GET", "/bans")
        assert [(b["as"], b["who"]) for b in listed["data"]] == [("clientid", "dev-bad")]
        acks = await device.until(lambda acks: len(acks) >= refused_before + 1)
        assert acks[-1] == 0x8A, acks
        assert "dev-bad" not in core(bridge).active

        # lifted: the same paho client, still on its default reconnect, comes back by itself
        status, lifted = await call(bridge, "DELETE", "/bans/clientid/dev-bad")
        assert status == 200 and lifted["lifted"]["who"] == "dev-bad"
        acks = await device.until(lambda acks: acks[-1] == 0)
        assert "dev-bad" in core(bridge).active
        assert (await call(bridge, "DELETE", "/bans/clientid/dev-bad"))[0] == 404
        assert json.loads((bridges.home / "bans.json").read_text()) == []
    finally:
        device.close()
        bystander.close()


async def test_bans_by_user_name_and_by_address(bridges: Bridges, raw_connect: Any) -> None:
    bridge = await bridges.start()
    port = mqtt_port(bridge)
    made: list[Client] = []
    try:
        status, ban = await call(bridge, "POST", "/bans", {"as": "username", "who": "mallory"})
        assert status == 201 and ban["until"] is None and ban["kicked"] == []
        # 3.1.1 has no "banned": return code 5, not authorized (paho 2 reports it as 0x87)
        old = Reconnecting(port, "old-1", protocol=paho.MQTTv311, username="mallory")
        try:
            assert (await old.until(lambda acks: len(acks) >= 1))[0] == 0x87
        finally:
            old.close()
        # on the wire: the connected 5.0 client gets DISCONNECT 0x98 (administrative action); a new
        # CONNECT gets 3.1.1 return code 5, 5.0 reason 0x8A, and the connection is closed after it
        raw, connack = await raw_connect(port, "bad-raw", level=MQTT_5)
        assert connack is not None and connack.reason_code == 0
        status, ban = await call(bridge, "POST", "/bans", {"as": "clientid", "who": "bad-raw"})
        assert status == 201 and ban["kicked"] == ["bad-raw"]
        assert [(type(p).__name__, p.reason_code) for p in await raw.until_closed()] == [("Disconnect", 0x98)]
        raw, connack = await raw_connect(port, "bad-raw")
        assert connack is not None and connack.reason_code == 5 and await raw.until_closed() == []
        raw, connack = await raw_connect(port, "bad-raw", level=MQTT_5)
        assert connack is not None and connack.reason_code == 0x8A and await raw.until_closed() == []
        new = Client(port, "new-1", version=V5)
        new.paho.username_pw_set("mallory")
        made.append(new)
        assert (await new.connect()).reason == 0x8A
        other = Client(port, "other-1", version=V311)
        made.append(other)
        assert (await other.connect()).reason == 0

        # an address ban covers its network: the loopback client is closed at once, a new one refused
        status, ban = await call(bridge, "POST", "/bans", {"as": "address", "who": "127.0.0.1/8", "duration": 60})
        assert status == 201 and ban["who"] == "127.0.0.0/8" and ban["kicked"] == ["other-1"]
        await other.wait_disconnected()
        late = Client(port, "late-1", version=V5)
        made.append(late)
        assert (await late.connect()).reason == 0x8A
        status, _ = await call(bridge, "DELETE", "/bans/address/127.0.0.0/8")
        assert status == 200
        again = Client(port, "late-2", version=V5)
        made.append(again)
        assert (await again.connect()).reason == 0

        # refusals: what the API cannot ban
        for body, problem in [
            ({"as": "ip", "who": "x"}, "as must be one of"),
            ({"as": "address", "who": "10.0.0.300"}, "not an IP address"),
            ({"as": "clientid", "who": ""}, "who must be"),
            ({"as": "clientid", "who": "a", "until": 1}, "in the past"),
            ({"as": "clientid", "who": "a", "duration": -5}, "duration must be"),
        ]:
            status, answer = await call(bridge, "POST", "/bans", body)
            assert status == 400 and problem in answer["error"], (body, answer)
    finally:
        for client in made:
            await client.close()


async def test_an_expired_ban_lets_the_client_in(bridges: Bridges) -> None:
    bridge = await bridges.start()
    status, _ = await call(bridge, "POST", "/bans", {"as": "clientid", "who": "brief", "duration": 1})
    assert status == 201
    client = Client(mqtt_port(bridge), "brief", version=V5)
    try:
        assert (await client.connect()).reason == 0x8A
        # wait for the expiry by the list, not by a clock in the test
        await eventually(lambda: call(bridge, "GET", "/bans"), lambda answer: answer[1]["data"] == [], TIMEOUT)
        again = Client(mqtt_port(bridge), "brief", version=V5)
        try:
            assert (await again.connect()).reason == 0
        finally:
            await again.close()
    finally:
        await client.close()


async def test_ctl_bans(bridges: Bridges) -> None:
    bridge = await bridges.start()
    made: list[Client] = []
    try:
        victim = Client(mqtt_port(bridge), "noisy-1", version=V311)
        made.append(victim)
        assert (await victim.connect()).reason == 0
        out = await ctl(
            "--url", base(bridge), "bans", "add", "clientid", "noisy-1", "--for", "2h", "--reason", "noise", key=KEY
        )
        assert out[0] == 0, out
        assert out[1].startswith("banned clientid noisy-1 until ") and out[1].strip().endswith("closed noisy-1")
        await victim.wait_disconnected()
        code, table, _ = await ctl("--url", base(bridge), "bans", "list", key=KEY)
        lines = table.splitlines()
        assert code == 0 and lines[0].split() == ["AS", "WHO", "UNTIL", "BY", "REASON"]
        assert lines[1].split()[:2] == ["clientid", "noisy-1"] and lines[1].split()[-2:] == ["ops", "noise"]
        code, listed, _ = await ctl("--url", base(bridge), "--json", "bans", "list", key=KEY)
        assert code == 0 and [(b["as"], b["who"]) for b in json.loads(listed)] == [("clientid", "noisy-1")]
        assert (await ctl("--url", base(bridge), "bans", "del", "clientid", "noisy-1", key=KEY))[1].strip() == (
            "lifted the ban on clientid noisy-1"
        )
        code, _, err = await ctl("--url", base(bridge), "bans", "del", "clientid", "noisy-1", key=KEY)
        assert code == 1 and "404 no such ban" in err
        assert (await ctl("--url", base(bridge), "bans", "list", key=KEY))[1].strip() == "no bans"
    finally:
        for client in made:
            await client.close()


async def test_dashboard_bans_and_lifts(bridges: Bridges) -> None:
    bridge = await bridges.start()
    made: list[Client] = []
    rows = "[...document.querySelectorAll('#bans tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
    try:
        victim = Client(mqtt_port(bridge), "tablet-9", version=V5)
        made.append(victim)
        assert (await victim.connect()).reason == 0
        async with browser(height=1000) as page:
            await page.goto(base(bridge) + "/")
            await page.evaluate(
                f"document.getElementById('key').value = {json.dumps(KEY)};"
                "document.getElementById('login').requestSubmit(); true"
            )
            await page.until("document.body.dataset.loaded === 'yes'")
            assert await page.evaluate(rows) == []
            await page.evaluate(
                "document.getElementById('ban-as').value = 'clientid';"
                "document.getElementById('ban-who').value = 'tablet-9';"
                "document.getElementById('ban-minutes').value = '30';"
                "document.getElementById('ban-reason').value = 'stolen';"
                "document.getElementById('ban-form').requestSubmit(); true"
            )
            shown = await page.until(f"{rows}.length === 1 && {rows}")
            assert shown[0][:2] == ["clientid", "tablet-9"] and shown[0][3:5] == ["ops", "stolen"]
            await victim.wait_disconnected()
            assert [(b.kind, b.who) for b in core(bridge).bans.listed()] == [("clientid", "tablet-9")]
            again = Client(mqtt_port(bridge), "tablet-9", version=V5)
            made.append(again)
            assert (await again.connect()).reason == 0x8A

            await page.evaluate(
                "document.querySelector('#bans tr[data-ban=\"clientid/tablet-9\"] button').click(); true"
            )
            await page.until(f"{rows}.length === 0")
            assert core(bridge).bans.listed() == []
            assert page.errors == []
        back = Client(mqtt_port(bridge), "tablet-9", version=V5)
        made.append(back)
        assert (await back.connect()).reason == 0
    finally:
        for client in made:
            await client.close()
