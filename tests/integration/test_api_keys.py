"""API keys with a scope (bridge/api/keys.py, docs/operations.md#management-api-apiv1) against a real
`hookbridge run` process with real paho clients: a `read` key reads and is refused every change
(403, and nothing changes: the client stays connected, nothing is published or banned); an admin
sees each key's last use, never a key; the keys are read again on SIGHUP (a removed key is
refused from then on, a new one works; a config with an error keeps the keys in force)."""

from __future__ import annotations

import hashlib
import json
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import redis as redis_sync

from support.mqtt import V5, Client
from support.process import BridgeProcess
from tests.integration.test_ctl import ctl

ADMIN, READER, LATER = "admin-k3y-0123456789abcdef", "reader-k3y-0123456789abcdef", "later-k3y-0123456789abcdef"


def entry(name: str, key: str, scope: str = "") -> str:
    return f"{name}:sha256:{hashlib.sha256(key.encode()).hexdigest()}" + (f":{scope}" if scope else "")


def settings(home: Path, keys: str) -> str:
    return f"api.enabled = on\napi.keys = {keys}\nbroker.bans_file = {home / 'bans.json'}\n"


def call(bridge: BridgeProcess, method: str, path: str, key: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{bridge.metrics_port}/api/v1{path}", data=data, method=method)
    request.add_header("Authorization", f"Bearer {key}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


async def test_a_read_key_reads_and_changes_nothing_and_keys_reload_on_sighup(
    tmp_path: Path, redis_port: int, redis_db: redis_sync.Redis, bridges: list[BridgeProcess]
) -> None:
    home = tmp_path / "bridge"
    home.mkdir()
    pools = f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\n"
    keys = f"{entry('ops', ADMIN)}, {entry('grafana', READER, 'read')}"
    bridge = BridgeProcess(home, pools, "", settings(home, keys)).start()
    bridges.append(bridge)
    device = Client(bridge.mqtt_port, "device-1", version=V5)
    try:
        assert (await device.connect()).reason == 0

        # read: every GET of the dashboard's, refused every change with 403
        for path in ("/clients", "/sessions", "/subscriptions", "/retained", "/rules", "/pools", "/bans", "/stats"):
            assert call(bridge, "GET", path, READER)[0] == 200, path
        assert call(bridge, "GET", "/clients/device-1", READER)[1]["connected"] is True
        for method, path, body in [
            ("DELETE", "/clients/device-1", None),
            ("POST", "/publish", {"topic": "t/1", "payload": "x"}),
            ("POST", "/bans", {"as": "clientid", "who": "device-1"}),
            ("POST", "/clients/device-1/subscriptions", {"filter": "a/#", "qos": 0}),
            ("DELETE", "/sessions/device-1/queue", None),
            ("POST", "/reload", {}),
            ("GET", "/keys", None),
        ]:
            status, answer = call(bridge, method, path, READER, body)
            assert status == 403, (method, path, status, answer)
            assert answer["error"].startswith("key grafana has scope read: ") and "needs admin" in answer["error"]
        assert call(bridge, "GET", "/clients/device-1", ADMIN)[1]["connected"] is True  # not kicked
        assert call(bridge, "GET", "/bans", ADMIN)[1]["data"] == []  # not banned
        assert call(bridge, "GET", "/subscriptions", ADMIN)[1]["data"] == []  # not subscribed

        # an admin sees each key's last use, never a key or its hash
        status, listed = call(bridge, "GET", "/keys", ADMIN)
        assert status == 200
        by_name = {key["name"]: key for key in listed["data"]}
        assert {name: key["scope"] for name, key in by_name.items()} == {"grafana": "read", "ops": "admin"}
        assert by_name["grafana"]["last_from"] == "127.0.0.1" and by_name["grafana"]["last_used"] > 0
        text = json.dumps(listed)
        assert READER not in text and ADMIN not in text and hashlib.sha256(READER.encode()).hexdigest() not in text
        code, table, _ = await ctl("--url", f"http://127.0.0.1:{bridge.metrics_port}", "keys", key=ADMIN)
        assert code == 0 and table.splitlines()[0].split() == ["NAME", "SCOPE", "LAST", "USED", "FROM"]
        assert [line.split()[:2] for line in table.splitlines()[1:]] == [["grafana", "read"], ["ops", "admin"]]

        # SIGHUP: grafana's key removed, a new read key added; the admin key stays with its last use
        config = home / "bridge.conf"
        config.write_text(config.read_text().replace(keys, f"{entry('ops', ADMIN)}, {entry('later', LATER, 'read')}"))
        assert bridge.process is not None
        bridge.process.send_signal(signal.SIGHUP)
        bridge.wait_for(lambda: call(bridge, "GET", "/clients", READER)[0] == 401, "the removed key to be refused")
        assert call(bridge, "GET", "/clients", LATER)[0] == 200
        assert call(bridge, "DELETE", "/clients/device-1", LATER)[0] == 403
        names = [key["name"] for key in call(bridge, "GET", "/keys", ADMIN)[1]["data"]]
        assert names == ["later", "ops"]

        # a config with an error: the keys in force stay
        config.write_text(config.read_text() + "api.keys_typo = 1\n")
        bridge.process.send_signal(signal.SIGHUP)
        bridge.wait_for(lambda: "reload refused" in bridge.log.read_text(), "the reload to be refused")
        assert call(bridge, "GET", "/clients", LATER)[0] == 200
        assert call(bridge, "DELETE", "/clients/device-1", ADMIN)[0] == 200  # the admin key still kicks
        log = bridge.log.read_text()
        assert ADMIN not in log and READER not in log and LATER not in log
    finally:
        await device.close()


async def test_the_dashboard_shows_keys_to_an_admin_and_hides_them_from_a_read_key(
    tmp_path: Path, redis_port: int, redis_db: redis_sync.Redis, bridges: list[BridgeProcess]
) -> None:
    from support.cdp import browser

    home = tmp_path / "bridge"
    home.mkdir()
    pools = f"backend.redis.pool1.server = 127.0.0.1:{redis_port}\n"
    keys = f"{entry('ops', ADMIN)}, {entry('grafana', READER, 'read')}"
    bridge = BridgeProcess(home, pools, "", settings(home, keys)).start()
    bridges.append(bridge)
    device = Client(bridge.mqtt_port, "screen-1", version=V5)
    rows = "[...document.querySelectorAll('#keys tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
    try:
        assert (await device.connect()).reason == 0
        assert call(bridge, "GET", "/clients", READER)[0] == 200  # grafana's last use: now, from 127.0.0.1
        for key, admin in ((ADMIN, True), (READER, False)):
            async with browser() as page:
                await page.goto(f"http://127.0.0.1:{bridge.metrics_port}/")
                await page.evaluate(
                    f"document.getElementById('key').value = {json.dumps(key)};"
                    "document.getElementById('login').requestSubmit(); true"
                )
                await page.until("document.body.dataset.loaded === 'yes'")
                ids = "[...document.querySelectorAll('#clients tbody tr')].map(r => r.dataset.clientid)"
                assert await page.until(f"{ids}.length === 1 && {ids}") == ["screen-1"]
                if admin:
                    shown = await page.until(f"{rows}.length === 2 && {rows}")
                    assert [row[:2] for row in shown] == [["grafana", "read"], ["ops", "admin"]]
                    assert shown[0][3] == "127.0.0.1" and shown[0][2] != "never"
                    assert ADMIN not in await page.evaluate("document.body.textContent")
                else:
                    assert await page.evaluate("document.getElementById('keys-section').hidden")
                    # a read key's kick is refused and says why; the client stays
                    kick = "document.querySelector('#clients tr[data-clientid=\"screen-1\"] button.kick').click(); true"
                    await page.evaluate(kick)
                    await page.evaluate(kick)
                    error = await page.until(
                        "!document.getElementById('error').hidden && document.getElementById('error').textContent"
                    )
                    assert "scope read" in error
                    assert call(bridge, "GET", "/clients/screen-1", ADMIN)[1]["connected"] is True
                assert page.errors == []
    finally:
        await device.close()
