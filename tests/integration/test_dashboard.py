"""The dashboard at / (bridge/api/static/, docs/operations.md#the-dashboard-) in a real browser: headless Chromium
driven over the DevTools protocol (tests/support/cdp.py) against a real running bridge (the
embedded broker, the shipped rules on the test Redis) with real paho clients. The page asks for
the API key, then shows the charts, rules, pools, clients, a session and retained messages; a
client kicked from the page is gone. The test saves docs/dashboard.png (shown in the README)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path

import aiohttp
import pytest
import redis as redis_sync

from bridge.app import Bridge, Paths
from support.bridges import BridgeFactory, connected
from support.cdp import Page, browser
from support.conf import config_text
from support.mqtt import V5, V311, Client
from support.services import ROOT

KEY = "dashboard-k3y-0123456789"
KEY_LINE = f"api.keys = ops:sha256:{hashlib.sha256(KEY.encode()).hexdigest()}\n"
SCREENSHOT = ROOT / "docs" / "dashboard.png"


@pytest.fixture
async def bridge(make_bridge: BridgeFactory, redis_db: redis_sync.Redis) -> Bridge:
    return await make_bridge(None, f"api.enabled = on\n{KEY_LINE}api.sample_interval = 200ms\n", http=True)


def cells(table: str) -> str:
    """JavaScript: the rows of a table's body as lists of cell texts."""
    return f"[...document.querySelectorAll('#{table} tbody tr')].map(r => [...r.cells].map(c => c.textContent))"


async def test_dashboard_shows_the_bridge_and_kicks_a_client(bridge: Bridge, clients: list[Client]) -> None:
    assert bridge.status is not None
    base = f"http://127.0.0.1:{bridge.status.port}"
    watcher = await connected(bridge, clients, "watcher", version=V5, clean=False)
    assert await watcher.subscribe("sensors/#", 1) == [1]
    assert await watcher.subscribe("alerts/+", 0) == [0]
    await asyncio.sleep(0.5)
    sensor = await connected(bridge, clients, "sensor-1", version=V5)
    # traffic over a few samples (one every 200 ms), in bursts of different sizes, for the charts
    sent = 0
    for burst in (4, 10, 16, 6, 12):
        for _ in range(burst):
            i = sent
            assert await sensor.publish(f"sensors/{i % 4}/temp", f"{20 + i % 7}".encode(), 1, retain=i >= 44) == 0
            sent += 1
        await asyncio.sleep(0.3)
        if sent == 14:
            victim = await connected(bridge, clients, "sensor-2", version=V311)
    assert sent == 48
    await watcher.expect(48)

    async with browser(height=1000) as page:
        # the page itself is static and holds no data; the API needs the key, asked for once
        await page.goto(base + "/")
        assert await page.until("!document.getElementById('login').hidden")
        assert await page.evaluate("document.getElementById('main').hidden")
        await page.evaluate(
            f"document.getElementById('key').value = {json.dumps(KEY)};"
            "document.getElementById('login').requestSubmit(); true"
        )
        await page.until("document.body.dataset.loaded === 'yes'")
        assert await page.evaluate("sessionStorage.getItem('hookbridge-key')") == KEY

        await show_what_the_bridge_holds(page, bridge)
        await search_and_open_a_session(page)

        SCREENSHOT.parent.mkdir(exist_ok=True)
        await page.screenshot(SCREENSHOT)
        assert SCREENSHOT.stat().st_size > 20_000

        # kick: the first click arms the button, the second kicks
        kick = "document.querySelector('#clients tr[data-clientid=\"sensor-2\"] button.kick').click(); true"
        await page.evaluate(kick)
        assert (
            await page.evaluate("document.querySelector('#clients tr[data-clientid=\"sensor-2\"] button').textContent")
            == "confirm kick"
        )
        assert not victim.disconnected.done()
        await page.evaluate(kick)
        await victim.wait_disconnected()
        await page.until("!document.querySelector('#clients tr[data-clientid=\"sensor-2\"]')")
        assert "sensor-2" not in bridge.broker.core.active  # type: ignore[attr-defined]
        ids = await page.evaluate("[...document.querySelectorAll('#clients tbody tr')].map(r => r.dataset.clientid)")
        assert ids == ["sensor-1"]  # the search still holds
        assert page.errors == []


async def show_what_the_bridge_holds(page: Page, bridge: Bridge) -> None:
    clients = await page.until(f"{cells('clients')}.length === 3 && {cells('clients')}")
    assert [(row[0], row[2]) for row in clients] == [("sensor-1", "yes"), ("sensor-2", "yes"), ("watcher", "yes")]
    assert clients[2][5] == "2"  # subscriptions
    rules = await page.evaluate(cells("rules"))
    assert sorted(row[0] for row in rules) == sorted(rule.id for rule in bridge.engine.rules)
    counters = bridge.metrics.rules
    for row in rules:
        assert int(row[2].replace(",", "")) == counters.get(row[0], {}).get("matched", 0), row
    pools = await page.evaluate(cells("pools"))
    assert [row[:2] for row in pools] == [["redis.pool1", "up"]]
    assert (await page.evaluate("document.getElementById('status').textContent")).startswith("version")
    # the charts: a line with a point per sample
    connections = await page.until(
        "+document.querySelector('#chart-connections polyline.connections').dataset.points > 3 &&"
        " document.getElementById('now-connections').textContent"
    )
    assert connections == "3"
    received = await page.evaluate("+document.querySelector('#chart-messages polyline.received').dataset.points")
    assert received > 3
    async with aiohttp.ClientSession() as session:
        assert bridge.status is not None
        url = f"http://127.0.0.1:{bridge.status.port}/api/v1/stats"
        async with session.get(url, headers={"Authorization": f"Bearer {KEY}"}) as answer:
            stats = await answer.json()
    assert sum(s["received"] or 0 for s in stats["samples"]) > 0  # messages/s was not 0 all along
    # retained messages by filter
    retained = await page.evaluate(cells("retained"))
    assert [row[0] for row in retained] == [f"sensors/{i}/temp" for i in range(4)]
    await page.evaluate(
        "document.getElementById('retained-filter').value = 'sensors/2/#';"
        "document.getElementById('retained-form').requestSubmit(); true"
    )
    retained = await page.until(f"{cells('retained')}.length === 1 && {cells('retained')}")
    assert retained == [["sensors/2/temp", "1", "2", "24"]]  # i = 46: 20 + 46 % 7


async def search_and_open_a_session(page: Page) -> None:
    await page.evaluate(
        "{ const box = document.getElementById('client-search'); box.value = 'watch';"
        "box.dispatchEvent(new Event('input')); } true"
    )
    ids = "[...document.querySelectorAll('#clients tbody tr')].map(r => r.dataset.clientid)"
    assert await page.until(f"{ids}.length === 1 && {ids}") == ["watcher"]
    await page.evaluate("document.querySelector('#clients tr[data-clientid=\"watcher\"]').click(); true")
    await page.until("!document.getElementById('session').hidden")
    assert await page.evaluate("document.getElementById('session-id').textContent") == "watcher"
    assert await page.evaluate(cells("session-subs")) == [["alerts/+", "0"], ["sensors/#", "1"]]
    fields = await page.evaluate("document.getElementById('session-fields').textContent")
    assert "connectedyes" in fields and "0 messages" in fields
    await page.evaluate(
        "{ const box = document.getElementById('client-search'); box.value = 'sensor';"
        "box.dispatchEvent(new Event('input')); } true"
    )
    assert await page.until(f"{ids}.length === 2 && {ids}") == ["sensor-1", "sensor-2"]


async def test_the_page_holds_no_data_and_the_data_needs_the_key(bridge: Bridge) -> None:
    assert bridge.status is not None
    base = f"http://127.0.0.1:{bridge.status.port}"
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/") as answer:
            assert answer.status == 200 and answer.content_type == "text/html"
            assert "default-src 'self'" in answer.headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"]
        async with session.get(base + "/static/dashboard.js") as answer:
            assert answer.status == 200 and "sessionStorage" in await answer.text()
        async with session.get(base + "/api/v1/stats") as answer:
            assert answer.status == 401
        for path in ("/static/../routes.py", "/static/%2e%2e/routes.py", "/static/..%2Fopenapi.py", "/static/"):
            async with session.get(base + path) as answer:
                assert answer.status in (403, 404), path
                assert "import" not in await answer.text(), path
        async with session.get(base + "/api/v1/stats", headers={"Authorization": f"Bearer {KEY}"}) as answer:
            stats = await answer.json()
    assert stats["interval"] == 0.2 and stats["window"] == 3600
    assert stats["samples"] and set(stats["samples"][-1]) == {"t", "connections", "received", "sent", "events"}


async def test_anonymous_loopback_needs_no_key(tmp_path: Path, redis_port: int, redis_db: redis_sync.Redis) -> None:
    """With api.allow_anonymous_loopback, a browser on the machine gets the page without a key."""
    home = tmp_path / "anonymous"
    (home / "rules").mkdir(parents=True)
    shutil.copytree(ROOT / "templates", home / "templates")
    (home / "rules" / "none.conf").write_text("")
    extra = f"spool.dir = {home / 'spool'}\ndeadletter.dir = {home / 'dl'}\n"
    extra += "api.enabled = on\napi.allow_anonymous_loopback = on\n"
    text = config_text(redis_port, extra).replace("metrics.listener = off\n", "metrics.listener = 127.0.0.1:0\n")
    (home / "bridge.conf").write_text(text)
    started = Bridge.load(Paths(home / "bridge.conf", home / "rules"))
    await started.start()
    made: list[Client] = []
    try:
        await connected(started, made, "lonely", version=V5)
        assert started.status is not None
        async with browser() as page:
            await page.goto(f"http://127.0.0.1:{started.status.port}/")
            await page.until("document.body.dataset.loaded === 'yes'")
            assert await page.evaluate("document.getElementById('login').hidden")
            ids = "[...document.querySelectorAll('#clients tbody tr')].map(r => r.dataset.clientid)"
            assert await page.until(f"{ids}.length === 1 && {ids}") == ["lonely"]
            assert await page.evaluate("document.querySelectorAll('#rules tbody tr').length") == 0
            assert page.errors == []
    finally:
        for client in made:
            await client.close()
        await started.stop(drain_timeout=5)
