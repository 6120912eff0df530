"""Sessions an operator looks into and removes (bridge/api/sessions.py, docs/operations.md#sessions)
against a real bridge with real paho clients: a durable offline session's queued and in-flight
messages listed (paged) and purged, the session removed with its durable rows (gone after a
restart too), client details with connect time, keepalive, will topic and per-connection
counters, and what a kick answers for a client that already left."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis as redis_sync

from bridge.app import Bridge, Paths
from support.bridges import core, eventually, mqtt_port
from support.cdp import browser
from support.conf import config_text
from support.mqtt import V5, V311, Client
from support.services import ROOT
from tests.integration.test_bans import KEY, KEY_LINE
from tests.integration.test_ctl import ctl
from tests.integration.test_durable_sessions import store_rows_mentioning


class Home:
    """One bridge home (durable sessions on, the API with KEY), started and stopped in-process."""

    def __init__(self, home: Path, redis_port: int) -> None:
        self.home = home
        (home / "rules").mkdir(parents=True)
        shutil.copytree(ROOT / "templates", home / "templates")
        (home / "rules" / "none.conf").write_text("")
        extra = f"spool.dir = {home / 'spool'}\ndeadletter.dir = {home / 'dl'}\napi.enabled = on\n{KEY_LINE}"
        extra += f"broker.durable_sessions = on\nbroker.durable_dir = {home / 'store'}\n"
        extra += f"broker.bans_file = {home / 'bans.json'}\nbroker.max_inflight = 2\n"
        text = config_text(redis_port, extra).replace("metrics.listener = off\n", "metrics.listener = 127.0.0.1:0\n")
        (home / "bridge.conf").write_text(text)
        self.bridge: Bridge | None = None

    def read_queues_when_needed(self) -> None:
        """broker.durable_preload 0: after a restart each session's queue stays in the store until
        something needs it (by default a small store's are all read at start)."""
        conf = self.home / "bridge.conf"
        conf.write_text(conf.read_text() + "broker.durable_preload = 0\n")

    async def start(self) -> Bridge:
        self.bridge = Bridge.load(Paths(self.home / "bridge.conf", self.home / "rules"))
        await self.bridge.start()
        return self.bridge

    async def stop(self) -> None:
        if self.bridge is not None:
            await self.bridge.stop(drain_timeout=5)
            self.bridge = None

    async def call(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        assert self.bridge is not None and self.bridge.status is not None
        url = f"http://127.0.0.1:{self.bridge.status.port}/api/v1{path}"
        headers = {"Authorization": f"Bearer {KEY}"}
        async with aiohttp.ClientSession() as session, session.request(method, url, headers=headers, **kwargs) as got:
            return got.status, await got.json()


@pytest.fixture
async def home(tmp_path: Path, redis_port: int, redis_db: redis_sync.Redis) -> AsyncIterator[Home]:
    made = Home(tmp_path / "bridge", redis_port)
    yield made
    await made.stop()


async def test_an_offline_sessions_messages_are_listed_purged_and_the_session_removed(
    home: Home, clients: list[Client]
) -> None:
    bridge = await home.start()
    port = mqtt_port(bridge)
    # a durable session that takes 2 messages in flight (max_inflight = 2), acks none, and leaves
    reader = Client(port, "reader-1", version=V311, clean=False, manual_ack=True)
    clients.append(reader)
    assert (await reader.connect()).reason == 0
    assert await reader.subscribe("q/#", 1) == [1]
    sender = Client(port, "sender-1", version=V5)
    clients.append(sender)
    assert (await sender.connect()).reason == 0
    for i in range(2):
        assert await sender.publish(f"q/{i}", f"first-{i}".encode(), 1) == 0
    assert [(await reader.message()).payload for _ in range(2)] == [b"first-0", b"first-1"]
    await reader.close()  # unacknowledged: both stay in flight
    for i in range(5):
        assert await sender.publish(f"q/{i}", f"queued-{i}".encode(), 1) == 0

    # the queue, paged in publish order
    status, first = await home.call("GET", "/sessions/reader-1/queue", params={"limit": "3"})
    assert status == 200 and [m["payload"] for m in first["data"]] == ["queued-0", "queued-1", "queued-2"]
    assert first["data"][0]["topic"] == "q/0" and first["data"][0]["qos"] == 1 and first["data"][0]["bytes"] == 8
    assert first["data"][0]["from_clientid"] == "sender-1" and first["next"]
    status, rest = await home.call("GET", "/sessions/reader-1/queue", params={"cursor": first["next"]})
    assert [m["payload"] for m in rest["data"]] == ["queued-3", "queued-4"] and rest["next"] is None
    # the queue moves on between pages (its two oldest dropped): the next page still starts after the cursor
    second = (await home.call("GET", "/sessions/reader-1/queue", params={"limit": "2", "cursor": first["next"]}))[1]
    state = core(bridge).states["reader-1"]
    state.drop_oldest("offline_messages")
    state.drop_oldest("offline_messages")
    status, moved = await home.call("GET", "/sessions/reader-1/queue", params={"cursor": second["data"][0]["msgid"]})
    assert status == 400  # a cursor is the previous page's next, not a message id
    status, moved = await home.call("GET", "/sessions/reader-1/queue", params={"cursor": first["next"]})
    assert [m["payload"] for m in moved["data"]] == ["queued-3", "queued-4"]
    status, everything = await home.call("GET", "/sessions/reader-1/queue")
    assert [m["payload"] for m in everything["data"]] == ["queued-2", "queued-3", "queued-4"]
    status, inflight = await home.call("GET", "/sessions/reader-1/inflight")
    assert [(m["payload"], m["packet_id"] > 0) for m in inflight["data"]] == [("first-0", True), ("first-1", True)]

    # purged: the queue, then what was in flight
    status, purged = await home.call("DELETE", "/sessions/reader-1/queue")
    assert (status, purged) == (200, {"clientid": "reader-1", "purged": 3})
    status, session = await home.call("GET", "/sessions/reader-1")
    assert session["queue"] == {"messages": 0, "bytes": 0} and session["inflight"] == 2
    status, purged = await home.call("DELETE", "/sessions/reader-1/inflight")
    assert (status, purged["purged"]) == (200, 2)
    assert (await home.call("GET", "/sessions/reader-1/inflight"))[1]["data"] == []

    # a message queued after the purge, then the session removed; its client finds nothing
    assert await sender.publish("q/late", b"late-message", 1) == 0
    assert (await home.call("GET", "/sessions/reader-1"))[1]["queue"]["messages"] == 1
    status, removed = await home.call("DELETE", "/sessions/reader-1")
    assert (status, removed) == (200, {"removed": "reader-1"})
    assert (await home.call("GET", "/sessions/reader-1"))[0] == 404
    assert "reader-1" not in core(bridge).states
    assert (await home.call("DELETE", "/sessions/reader-1"))[0] == 404
    assert store_rows_mentioning(home.home / "store", [b"reader-1"]) == []  # the durable rows went

    # after a restart the session is still gone: the client gets a new, empty one
    await home.stop()
    bridge = await home.start()
    assert "reader-1" not in core(bridge).states
    back = Client(mqtt_port(bridge), "reader-1", version=V311, clean=False)
    clients.append(back)
    connack = await back.connect()
    assert connack.reason == 0 and not connack.session_present
    assert back.messages.empty()


async def test_a_connected_sessions_in_flight_messages_stay_and_its_session_cannot_be_removed(
    home: Home, clients: list[Client]
) -> None:
    bridge = await home.start()
    online = Client(mqtt_port(bridge), "online-1", version=V5, clean=False)
    clients.append(online)
    assert (await online.connect()).reason == 0
    status, answer = await home.call("DELETE", "/sessions/online-1")
    assert status == 409 and "kick it first" in answer["error"]
    status, answer = await home.call("DELETE", "/sessions/online-1/inflight")
    assert status == 409
    assert (await home.call("DELETE", "/sessions/online-1/queue"))[1]["purged"] == 0
    assert "online-1" in core(bridge).active


async def test_client_details_and_kicking_a_client_that_left(home: Home, clients: list[Client]) -> None:
    bridge = await home.start()
    port = mqtt_port(bridge)
    before = time.time()
    device = Client(port, "device-1", version=V5)
    clients.append(device)
    device.paho.will_set("wills/device-1", b"gone", 1)
    assert (await device.connect(keepalive=45)).reason == 0
    assert await device.subscribe("echo/#", 1) == [1]
    for _ in range(3):
        assert await device.publish("echo/x", b"0123456789", 1) == 0
    for _ in range(3):
        await device.message()
    status, details = await home.call("GET", "/clients/device-1")
    assert status == 200
    assert before <= details["connected_at"] <= time.time()
    assert details["keepalive"] == 45 and details["will_topic"] == "wills/device-1"
    assert (details["messages_in"], details["messages_out"]) == (3, 3)
    # bytes: CONNECT + SUBSCRIBE + 3 PUBLISH + 3 PUBACK in; CONNACK + SUBACK + 3 PUBACK + 3 PUBLISH out
    assert details["bytes_in"] > 3 * 19 and details["bytes_out"] > 3 * 19
    conn = core(bridge).active["device-1"]
    # the counters are the connection's own (the client's last PUBACK may still be on its way: read again)
    await eventually(
        lambda: home.call("GET", "/clients/device-1"),
        lambda answer: (
            (answer[1]["bytes_in"], answer[1]["bytes_out"]) == (conn.details().bytes_in, conn.details().bytes_out)
        ),
    )

    # a clean-session client that left has no session: 404, as EMQX answers for an unknown client
    await device.disconnect()
    status, answer = await home.call("DELETE", "/clients/device-1")
    assert (status, answer["error"]) == (404, "no such client")
    # a persistent session whose client left: 409, it is not connected (remove it: DELETE /sessions/)
    keeper = Client(port, "keeper-1", version=V311, clean=False)
    clients.append(keeper)
    assert (await keeper.connect()).reason == 0
    await keeper.disconnect()
    status, answer = await home.call("DELETE", "/clients/keeper-1")
    assert (status, answer["error"]) == (
        409,
        "the client is not connected; its session stays (DELETE /api/v1/sessions/{clientid} removes it)",
    )
    status, details = await home.call("GET", "/clients/keeper-1")
    assert details["connected_at"] is None and details["messages_in"] == 0


async def test_ctl_sessions(home: Home, clients: list[Client]) -> None:
    bridge = await home.start()
    port = mqtt_port(bridge)
    assert bridge.status is not None
    base = f"http://127.0.0.1:{bridge.status.port}"
    reader = Client(port, "ctl-reader", version=V311, clean=False)
    clients.append(reader)
    assert (await reader.connect()).reason == 0
    assert await reader.subscribe("c/#", 1) == [1]
    await reader.disconnect()
    sender = Client(port, "ctl-sender", version=V5)
    clients.append(sender)
    assert (await sender.connect()).reason == 0
    assert await sender.publish("c/1", b"hello", 1) == 0

    code, out, err = await ctl("--url", base, "sessions", "queue", "ctl-reader", key=KEY)
    lines = out.splitlines()
    assert code == 0, err
    assert lines[0].split() == ["MSGID", "TOPIC", "QOS", "BYTES", "FROM", "PAYLOAD"]
    assert lines[1].split()[1:] == ["c/1", "1", "5", "ctl-sender", "hello"]
    assert (await ctl("--url", base, "sessions", "queue", "ctl-reader", "--inflight", key=KEY))[1].strip() == (
        "no messages in flight"
    )
    code, out, _ = await ctl("--url", base, "sessions", "purge", "ctl-reader", key=KEY)
    assert (code, out.strip()) == (0, "purged 1 queued messages of ctl-reader")
    code, out, _ = await ctl("--url", base, "sessions", "del", "ctl-reader", key=KEY)
    assert (code, out.strip()) == (0, "removed the session of ctl-reader")
    code, _, err = await ctl("--url", base, "sessions", "del", "ctl-reader", key=KEY)
    assert code == 1 and "404 no such session" in err


async def test_dashboard_shows_a_session_purges_its_queue_and_removes_it(home: Home, clients: list[Client]) -> None:
    bridge = await home.start()
    port = mqtt_port(bridge)
    reader = Client(port, "dash-reader", version=V311, clean=False)
    clients.append(reader)
    assert (await reader.connect()).reason == 0
    assert await reader.subscribe("d/#", 1) == [1]
    await reader.disconnect()
    sender = Client(port, "dash-sender", version=V5)
    clients.append(sender)
    assert (await sender.connect()).reason == 0
    for i in range(3):
        assert await sender.publish(f"d/{i}", f"m{i}".encode(), 1) == 0
    assert bridge.status is not None
    queue = "[...document.querySelectorAll('#session-queue tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
    async with browser(height=1000) as page:
        await page.goto(f"http://127.0.0.1:{bridge.status.port}/")
        await page.evaluate(
            f"document.getElementById('key').value = {json.dumps(KEY)};"
            "document.getElementById('login').requestSubmit(); true"
        )
        await page.until("document.body.dataset.loaded === 'yes'")
        await page.until("!!document.querySelector('#clients tr[data-clientid=\"dash-reader\"]')")
        await page.evaluate("document.querySelector('#clients tr[data-clientid=\"dash-reader\"]').click(); true")
        shown = await page.until(f"{queue}.length === 3 && {queue}")
        assert [(row[1], row[5]) for row in shown] == [("d/0", "m0"), ("d/1", "m1"), ("d/2", "m2")]
        fields = await page.evaluate("document.getElementById('session-fields').textContent")
        assert "connectedno" in fields and "3 messages" in fields

        purge = "document.getElementById('session-purge').click(); true"
        await page.evaluate(purge)
        assert await page.evaluate("document.getElementById('session-purge').textContent") == "confirm purge queue"
        assert core(bridge).states["dash-reader"].outbox  # armed, not done
        await page.evaluate(purge)
        await page.until(f"{queue}.length === 0")
        assert not core(bridge).states["dash-reader"].outbox

        remove = "document.getElementById('session-remove').click(); true"
        await page.evaluate(remove)
        await page.evaluate(remove)
        await page.until("document.getElementById('session').hidden")
        assert "dash-reader" not in core(bridge).states
        await page.until("!document.querySelector('#clients tr[data-clientid=\"dash-reader\"]')")
        assert page.errors == []


async def test_a_durable_session_restored_at_start_is_removed_before_it_is_loaded(
    home: Home, clients: list[Client]
) -> None:
    home.read_queues_when_needed()
    bridge = await home.start()
    port = mqtt_port(bridge)
    sleeper = Client(port, "sleeper-1", version=V311, clean=False)
    assert (await sleeper.connect()).reason == 0
    assert await sleeper.subscribe("s/#", 1) == [1]
    await sleeper.close()
    sender = Client(port, "sender-2", version=V5)
    assert (await sender.connect()).reason == 0
    for i in range(3):
        assert await sender.publish(f"s/{i}", b"kept", 1) == 0
    await sender.close()
    await home.stop()

    bridge = await home.start()  # sessions load on demand: this one's queue is still in the store
    assert core(bridge).states["sleeper-1"].unloaded is not None
    listed = (await home.call("GET", "/sessions", params={"prefix": "sleeper"}))[1]["data"]
    assert [(s["clientid"], s["loaded"]) for s in listed] == [("sleeper-1", False)]
    status, _ = await home.call("DELETE", "/sessions/sleeper-1")
    assert status == 200
    assert store_rows_mentioning(home.home / "store", [b"sleeper-1"]) == []
    await home.stop()  # (its messages leave the store's log with the log's trim: durable/journal.py)
    bridge = await home.start()
    assert "sleeper-1" not in core(bridge).states
    back = Client(mqtt_port(bridge), "sleeper-1", version=V311, clean=False)
    clients.append(back)
    assert not (await back.connect()).session_present
