"""The emqx mode against an EMQX 4.4 node's formats, without EMQX (it cannot run here): 4.4's
`$SYS` presence payloads, the rule-engine events it sends instead of the `$SYS` subscribed /
unsubscribed messages it lacks, and the v4 REST call for a proxy subscription (a local stand-in)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from bridge.brokers.external.emqx.mapping import rule_event, sys_event
from bridge.brokers.external.emqx.rest import EmqxApi
from bridge.events import ClientConnected, ClientDisconnected, MessageAcked, SessionSubscribed, SessionUnsubscribed

NODE = "emqx@127.0.0.1"
# EMQX 4.4's presence messages (emqx_mod_presence): times in ms, no proto_ver on disconnected.
CONNECTED_44 = {
    "clientid": "dev1",
    "username": "u1",
    "ipaddress": "10.0.0.5",
    "proto_name": "MQTT",
    "proto_ver": 4,
    "keepalive": 60,
    "clean_start": False,
    "expiry_interval": 0,
    "connected_at": 1700000000123,
    "ts": 1700000000124,
}
DISCONNECTED_44 = {"clientid": "dev1", "username": "u1", "reason": "normal", "ts": 1700000100000}
# EMQX 4.4 rule-engine events republished with `${.}` (rule SQL `SELECT * FROM "$events/..."`).
SUBSCRIBED_44 = {
    "event": "session.subscribed",
    "clientid": "dev1",
    "username": "u1",
    "peerhost": "10.0.0.5",
    "topic": "pubsub/#",
    "qos": 1,
    "timestamp": 1700000000200,
    "node": NODE,
}
ACKED_44 = {
    "event": "message.acked",
    "id": "0005F298A0F0AEE2F443000012DC0002",
    "clientid": "dev2",
    "username": "u2",
    "from_clientid": "dev1",
    "from_username": "u1",
    "topic": "pubsub/a",
    "qos": 1,
    "flags": {"retain": False, "dup": False},
    "headers": {},
    "pub_props": {"User-Property": {"app": "a1"}},
    "payload": "hello",
    "timestamp": 1700000000300,
    "publish_received_at": 1700000000250,
    "node": NODE,
}


def test_emqx44_presence_messages_become_client_events() -> None:
    base = f"$SYS/brokers/{NODE}/clients/dev1"
    connected = sys_event(f"{base}/connected", json.dumps(CONNECTED_44).encode())
    assert connected == ClientConnected(
        "dev1", "u1", NODE, "10.0.0.5", 1700000000.123, clean_session=False, proto_ver=4
    )
    disconnected = sys_event(f"{base}/disconnected", json.dumps(DISCONNECTED_44).encode())
    assert isinstance(disconnected, ClientDisconnected)
    assert (disconnected.reason, disconnected.timestamp, disconnected.proto_ver) == ("normal", 1700000100.0, 4)


def test_emqx44_session_rule_events_become_session_events() -> None:
    subscribed = rule_event(json.dumps(SUBSCRIBED_44).encode())
    assert subscribed == SessionSubscribed("dev1", "u1", NODE, "pubsub/#", 1, 1700000000.2, is_new=True)
    unsubscribed = rule_event(json.dumps({**SUBSCRIBED_44, "event": "session.unsubscribed"}).encode())
    assert unsubscribed == SessionUnsubscribed("dev1", "u1", NODE, "pubsub/#", 1700000000.2)
    assert rule_event(json.dumps({**SUBSCRIBED_44, "topic": None}).encode()) is None
    acked = rule_event(json.dumps(ACKED_44).encode())
    assert isinstance(acked, MessageAcked)
    assert (acked.msgid, acked.clientid, acked.from_clientid, acked.payload) == (
        ACKED_44["id"],
        "dev2",
        "dev1",
        b"hello",
    )
    assert acked.user_properties == (("app", "a1"),) and acked.timestamp == 1700000000.3


@pytest.fixture
async def emqx44_api() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """EMQX 4.4's POST /api/v4/mqtt/subscribe, AppID `app`, AppSecret `secret`."""
    calls: list[dict[str, Any]] = []

    async def subscribe(request: web.Request) -> web.Response:
        body = await request.json()
        calls.append({"auth": request.headers.get("Authorization"), "body": body})
        if request.headers.get("Authorization") != "Basic " + base64.b64encode(b"app:secret").decode():
            return web.json_response({"message": "Authentication failed"}, status=401)
        if body["clientid"] != "dev-online":
            return web.json_response({"code": 112, "message": "Clientid not found"})
        return web.json_response({"code": 0})

    app = web.Application()
    app.router.add_post("/api/v4/mqtt/subscribe", subscribe)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", calls
    await runner.cleanup()


async def test_proxy_subscription_through_emqx44s_v4_api(emqx44_api: tuple[str, list[dict[str, Any]]]) -> None:
    url, calls = emqx44_api
    api = EmqxApi(url, "app", "secret", version="v4", backoff=0.01)
    try:
        assert await api.subscribe("dev-online", "proxy/dev-online", 1) is True
        assert calls[-1]["body"] == {"clientid": "dev-online", "topic": "proxy/dev-online", "qos": 1}
        assert await api.subscribe("dev-offline", "x", 0) is False  # code 112: not connected
    finally:
        await api.close()
