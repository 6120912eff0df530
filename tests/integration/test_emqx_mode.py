"""`broker.mode = emqx`, without EMQX: EMQX 5 cannot run on this machine (no container engine).

- The source runs against a real MQTT broker (Mosquitto) carrying EMQX-format system and
  rule-engine event messages, their payloads taken from EMQX's documentation. Mosquitto
  drops messages clients publish under `$SYS`, so these tests carry the system messages
  under `sim/$SYS/...` (the source's `sys_root`, a test-only knob); the rest of each topic
  and every payload is EMQX's.
- The REST client runs against a local aiohttp server implementing the one endpoint it calls.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync
from aiohttp import web

from bridge.app import Bridge, Paths
from bridge.brokers.external.emqx import EmqxSource
from bridge.brokers.external.emqx.rest import EmqxApi, EmqxApiError
from bridge.brokers.external.mqtt import Upstream
from bridge.conf.errors import ConfErrors
from bridge.events import (
    ClientConnected,
    ClientDisconnected,
    MessageAcked,
    MessageDelivered,
    MessagePublish,
    SessionSubscribed,
    SessionUnsubscribed,
)
from bridge.msgid import MsgIdGenerator
from support.bridges import eventually
from support.conf import config_text
from support.mqtt import Client
from support.services import ROOT, start_mosquitto
from support.sink import RecordingSink
from tests.integration.mqtt_support import MOSQUITTO_PORT, external_config

SIM = "sim/$SYS"
NODE = "emqx@172.17.0.2"

# Payloads as EMQX 5 documents them (observability/mqtt-system-topics; rule engine $events).
CONNECTED = {
    "username": "foo",
    "ts": 1625572213873,
    "sockport": 1883,
    "proto_ver": 5,
    "proto_name": "MQTT",
    "keepalive": 60,
    "ipaddress": "127.0.0.1",
    "expiry_interval": 7200,
    "connected_at": 1625572213873,
    "connack": 0,
    "clientid": "emqtt-8348fe27a87976ad4db3",
    "clean_start": False,
}
DISCONNECTED = {
    "username": "foo",
    "ts": 1625572213873,
    "sockport": 1883,
    "reason": "tcp_closed",
    "proto_ver": 5,
    "proto_name": "MQTT",
    "ipaddress": "127.0.0.1",
    "disconnected_at": 1625572213873,
    "clientid": "emqtt-8348fe27a87976ad4db3",
}
SUBSCRIBED = {
    "clientid": "emqtt-8348fe27a87976ad4db3",
    "username": "foo",
    "topic": "t/1",
    "subopts": {"qos": 1, "nl": 0, "rap": 0, "rh": 0, "is_new": True},
    "ts": 1625572213873,
    "protocol": "mqtt",
}
ACKED = {
    "event": "message.acked",
    "id": "0005F298A0F0AEE2F443000012DC0002",
    "from_clientid": "c_emqx_1",
    "from_username": "u_emqx_1",
    "clientid": "c_emqx_2",
    "username": "u_emqx_2",
    "payload": "hello",
    "peerhost": "192.168.0.10",
    "topic": "t/a",
    "qos": 1,
    "flags": {"sys": False, "event": False},
    # EMQX 5.1+: the object (first value per name) and the pairs (order and repeats kept)
    "pub_props": {
        "User-Property": {"app": "a1", "k": "v"},
        "User-Property-Pairs": [
            {"key": "app", "value": "a1"},
            {"key": "k", "value": "v"},
            {"key": "app", "value": "a2"},
        ],
        "Message-Expiry-Interval": 30,
    },
    "publish_received_at": 1645002753259,
    "timestamp": 1645002753259,
    "node": "emqx@127.0.0.1",
}


@pytest.fixture(scope="module")
def mosquitto() -> int:
    start_mosquitto(MOSQUITTO_PORT)
    return MOSQUITTO_PORT


@pytest.fixture
async def emqx_api() -> AsyncIterator[tuple[str, list[dict[str, Any]], dict[str, Any]]]:
    """A local EMQX REST stand-in: POST /api/v5/clients/{clientid}/subscribe, key `k`, secret `s`."""
    calls: list[dict[str, Any]] = []
    behaviour: dict[str, Any] = {"fail_first": 0, "online": {"dev-online"}}

    async def subscribe(request: web.Request) -> web.Response:
        calls.append(
            {
                "clientid": request.match_info["clientid"],
                "auth": request.headers.get("Authorization"),
                "body": await request.json(),
            }
        )
        if request.headers.get("Authorization") != "Basic " + base64.b64encode(b"k:s").decode():
            return web.json_response({"code": "BAD_API_KEY_OR_SECRET"}, status=401)
        if behaviour["fail_first"] > 0:
            behaviour["fail_first"] -= 1
            return web.json_response({"code": "SERVICE_UNAVAILABLE"}, status=503)
        if request.match_info["clientid"] not in behaviour["online"]:
            return web.json_response({"code": "CLIENTID_NOT_FOUND", "message": "Client ID not found"}, status=404)
        body = await request.json()
        return web.json_response({"clientid": request.match_info["clientid"], **body})

    app = web.Application()
    app.router.add_post("/api/v5/clients/{clientid}/subscribe", subscribe)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", calls, behaviour
    await runner.cleanup()


async def test_rest_subscribe_auth_retries_and_offline_client(
    emqx_api: tuple[str, list[dict[str, Any]], dict[str, Any]],
) -> None:
    url, calls, behaviour = emqx_api
    api = EmqxApi(url, "k", "s", backoff=0.01)
    try:
        behaviour["fail_first"] = 2
        assert await api.subscribe("dev-online", "a/+/c", 1) is True
        assert len(calls) == 3  # two 503s retried
        assert calls[-1] == {
            "clientid": "dev-online",
            "auth": "Basic " + base64.b64encode(b"k:s").decode(),
            "body": {"topic": "a/+/c", "qos": 1},
        }
        assert await api.subscribe("dev-offline", "x", 0) is False  # 404: the client is not connected
        assert await api.subscribe("we/ird id", "x", 0) is False
        assert calls[-1]["clientid"] == "we/ird id"  # percent-encoded in the path, decoded by the server
        behaviour["fail_first"] = 10
        with pytest.raises(EmqxApiError, match="failed 4 times: HTTP 503"):
            await api.subscribe("dev-online", "x", 0)
    finally:
        await api.close()
    bad = EmqxApi(url, "k", "wrong")
    try:
        with pytest.raises(EmqxApiError, match="EMQX API 401"):
            await bad.subscribe("dev-online", "x", 0)
    finally:
        await bad.close()


@pytest.fixture
async def emqx_source(mosquitto: int, tmp_path: Path) -> AsyncIterator[tuple[EmqxSource, RecordingSink]]:
    upstream = Upstream(
        "127.0.0.1", mosquitto, f"hb-{uuid.uuid4().hex[:8]}", state_dir=str(tmp_path), session_expiry=120
    )
    api = EmqxApi("http://127.0.0.1:9", "k", "s")
    src = EmqxSource(
        upstream,
        node="bridge",
        msgids=MsgIdGenerator(),
        message_filters=["t/#"],
        client_events=True,
        api=api,
        event_topic="hookbridge/events/#",
        sys_root=SIM,
    )
    sink = RecordingSink()
    await src.start(sink)
    await src._connection.connected.wait()  # type: ignore[union-attr]
    await asyncio.sleep(0.3)  # SUBACK
    yield src, sink
    await src.stop()


async def test_system_messages_and_rule_events_become_events(
    emqx_source: tuple[EmqxSource, RecordingSink], paho_clients: Callable[..., Client], mosquitto: int
) -> None:
    _src, sink = emqx_source
    emqx = paho_clients(mosquitto, f"emqx-sim-{uuid.uuid4().hex[:6]}")
    await emqx.connect()
    cid = CONNECTED["clientid"]
    base = f"{SIM}/brokers/{NODE}/clients/{cid}"
    await emqx.publish(f"{base}/connected", json.dumps(CONNECTED).encode())
    await emqx.publish(f"{base}/subscribed", json.dumps(SUBSCRIBED).encode())
    await emqx.publish(f"{base}/unsubscribed", json.dumps({**SUBSCRIBED, "subopts": {}}).encode())
    # an older EMQX: only the User-Property object
    delivered_doc = {**ACKED, "event": "message.delivered", "pub_props": {"User-Property": {"app": "a1"}}}
    await emqx.publish("hookbridge/events/message_delivered", json.dumps(delivered_doc).encode(), qos=1)
    await emqx.publish("hookbridge/events/message_acked", json.dumps(ACKED).encode(), qos=1)
    await emqx.publish(f"{base}/disconnected", json.dumps(DISCONNECTED).encode())
    await emqx.publish("hookbridge/events/x", b"not json", qos=1)
    await emqx.publish("t/1", b"an application message", qos=1)

    connected = await sink.wait_for(ClientConnected, clientid=cid)
    assert connected == ClientConnected(
        cid, "foo", NODE, "127.0.0.1:1883", 1625572213.873, clean_session=False, proto_ver=5
    )
    subscribed = await sink.wait_for(SessionSubscribed, clientid=cid)
    assert (subscribed.topic, subscribed.qos, subscribed.is_new, subscribed.node) == ("t/1", 1, True, NODE)
    assert subscribed.proto_ver == 4  # EMQX's subscribed message has no proto_ver
    unsubscribed = await sink.wait_for(SessionUnsubscribed, clientid=cid)
    assert unsubscribed.topic == "t/1"
    delivered = await sink.wait_for(MessageDelivered)
    acked = await sink.wait_for(MessageAcked)
    for receipt in (delivered, acked):
        assert receipt.msgid == "0005F298A0F0AEE2F443000012DC0002"  # EMQX's id, as EMQX gives it
        assert (receipt.clientid, receipt.from_clientid, receipt.topic, receipt.qos) == (
            "c_emqx_2",
            "c_emqx_1",
            "t/a",
            1,
        )
        assert (receipt.payload, receipt.node, receipt.timestamp) == (b"hello", "emqx@127.0.0.1", 1645002753.259)
    assert delivered.user_properties == (("app", "a1"),)
    assert acked.user_properties == (("app", "a1"), ("k", "v"), ("app", "a2"))
    disconnected = await sink.wait_for(ClientDisconnected, clientid=cid)
    assert disconnected.reason == "tcp_closed" and disconnected.proto_ver == 5
    message = await sink.wait_for(MessagePublish, topic="t/1")
    assert message.payload == b"an application message" and len(message.msgid) == 32
    assert _src.ignored == 1  # the non-JSON event message: ignored and counted


def _home(tmp_path: Path, rules: str, extra: str) -> Paths:
    (tmp_path / "rules").mkdir(parents=True)
    (tmp_path / "rules" / "emqx.conf").write_text(rules)
    shutil.copytree(ROOT / "templates", tmp_path / "templates")
    (tmp_path / "bridge.conf").write_text(config_text(6391, extra))
    return Paths(tmp_path / "bridge.conf", tmp_path / "rules")


async def test_proxy_subscription_through_the_rest_api(
    mosquitto: int,
    redis_db: redis_sync.Redis,
    tmp_path: Path,
    emqx_api: tuple[str, list[dict[str, Any]], dict[str, Any]],
    paho_clients: Callable[..., Client],
) -> None:
    url, calls, behaviour = emqx_api
    behaviour["fail_first"] = 1
    rules = 'backend.redis.hook.client.connected.1 = {"action": {"function": "on_subscribe_lookup"}}\n'
    extra = external_config(
        tmp_path, "emqx", extra=f"broker.emqx.api = {url}\nbroker.emqx.api_key = k\nbroker.emqx.api_secret = s\n"
    )
    bridge = Bridge.load(_home(tmp_path, rules, extra))
    assert isinstance(bridge.broker, EmqxSource)
    bridge.broker.sys_root = SIM
    await bridge.start()
    try:
        await bridge.broker._connection.connected.wait()  # type: ignore[union-attr]
        await asyncio.sleep(0.3)
        redis_db.hset("mqtt:sub:dev-online", mapping={"a/b": 1, "c/#": 2})
        emqx = paho_clients(mosquitto, f"emqx-sim-{uuid.uuid4().hex[:6]}")
        await emqx.connect()
        payload = json.dumps({**CONNECTED, "clientid": "dev-online"}).encode()
        await emqx.publish(f"{SIM}/brokers/{NODE}/clients/dev-online/connected", payload)
        done = await eventually(lambda: _ok(calls), lambda c: len(c) == 2)
        assert sorted((c["body"]["topic"], c["body"]["qos"]) for c in done) == [("a/b", 1), ("c/#", 2)]
        # an offline client (404) is not an error that stops anything
        redis_db.hset("mqtt:sub:dev-gone", mapping={"x": 1})
        payload = json.dumps({**CONNECTED, "clientid": "dev-gone"}).encode()
        await emqx.publish(f"{SIM}/brokers/{NODE}/clients/dev-gone/connected", payload)
        await eventually(lambda: _all(calls), lambda c: any(x["clientid"] == "dev-gone" for x in c))
        await bridge.idle()
    finally:
        await bridge.stop()


async def _ok(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen = {}
    for call in calls:
        seen[(call["clientid"], call["body"]["topic"])] = call
    return [c for c in seen.values() if c["clientid"] == "dev-online"]


async def _all(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(calls)


async def test_fetch_and_retain_lookup_are_refused_in_emqx_mode(tmp_path: Path) -> None:
    rules = (
        'backend.redis.hook.session.subscribed.1 = {"topic": "q/#", "action": {"function": "on_message_fetch_for_queue"}}\n'
        'backend.redis.hook.session.subscribed.2 = {"action": {"function": "on_retain_lookup"}}\n'
    )
    with pytest.raises(ConfErrors) as caught:
        Bridge.load(_home(tmp_path, rules, external_config(tmp_path, "emqx")))
    messages = [str(e) for e in caught.value.errors]
    assert len(messages) == 2
    assert (
        "function on_message_fetch_for_queue needs deliver-to-session, which broker mode emqx does not offer"
        in messages[0]
    )
    assert "function on_retain_lookup needs deliver-to-session, which broker mode emqx does not offer" in messages[1]
