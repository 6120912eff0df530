"""Client events derived from Mosquitto's log lines (`log_dest topic`), with real clients.

Mosquitto 2.0.11 (Debian 12) configured by scripts/mosquitto.sh: notice lines on
`$SYS/broker/log/N`, subscription lines on `$SYS/broker/log/M/subscribe|unsubscribe`.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bridge.brokers.external.mqtt import MqttSource, Upstream
from bridge.events import ClientConnected, ClientDisconnected, SessionSubscribed, SessionUnsubscribed
from bridge.msgid import MsgIdGenerator
from support.mqtt import Client
from support.services import start_mosquitto
from support.sink import RecordingSink
from tests.integration.mqtt_support import MOSQUITTO_PORT


@pytest.fixture(scope="module")
def mosquitto() -> int:
    start_mosquitto(MOSQUITTO_PORT)
    return MOSQUITTO_PORT


@pytest.fixture
async def source(mosquitto: int, tmp_path: Path) -> AsyncIterator[tuple[MqttSource, RecordingSink]]:
    upstream = Upstream(
        "127.0.0.1", mosquitto, f"hb-{uuid.uuid4().hex[:8]}", state_dir=str(tmp_path), session_expiry=120
    )
    src = MqttSource(upstream, node="n1", msgids=MsgIdGenerator(), message_filters=[], client_events=True)
    sink = RecordingSink()
    await src.start(sink)
    await src._connection.connected.wait()  # type: ignore[union-attr]
    await _settle(sink, mosquitto)
    yield src, sink
    await src.stop()


async def _settle(sink: RecordingSink, port: int) -> None:
    """Wait until the bridge's log subscriptions are active: a probe client's connect shows up."""

    for _ in range(50):
        probe = Client(port, f"probe-{uuid.uuid4().hex[:6]}")
        await probe.connect()
        await probe.disconnect()
        try:
            await sink.wait_for(ClientDisconnected, clientid=probe.clientid, timeout=0.3)
            return
        except TimeoutError:
            continue
    raise AssertionError("Mosquitto's log lines never arrived: is `log_dest topic` configured?")


async def test_connect_subscribe_unsubscribe_disconnect_of_real_clients(
    source: tuple[MqttSource, RecordingSink], paho_clients: Callable[..., Client], mosquitto: int
) -> None:
    _src, sink = source
    cid = f"dev-{uuid.uuid4().hex[:6]}"
    dev = paho_clients(mosquitto, cid, clean=False, username="alice")
    await dev.connect()
    connected = await sink.wait_for(ClientConnected, clientid=cid)
    assert connected.username == "alice" and connected.clean_session is False
    assert connected.proto_ver == 4  # paho speaks 3.1.1: Mosquitto logs "p2"
    assert connected.peername.startswith("127.0.0.1:") and connected.node == "n1"

    await dev.subscribe([("cmd/a", 1), ("cmd/+/b", 2), ("plain", 0)])
    subscribed = [await sink.wait_for(SessionSubscribed, clientid=cid, count=n) for n in (1, 2, 3)]
    assert [(e.topic, e.qos) for e in subscribed] == [("cmd/a", 1), ("cmd/+/b", 2), ("plain", 0)]
    assert all(e.username == "alice" and e.persistent and e.proto_ver == 4 for e in subscribed)

    await dev.unsubscribe("cmd/a")
    unsubscribed = await sink.wait_for(SessionUnsubscribed, clientid=cid)
    assert unsubscribed.topic == "cmd/a"

    await dev.disconnect()
    disconnected = await sink.wait_for(ClientDisconnected, clientid=cid)
    assert disconnected.reason == "normal" and disconnected.username == "alice"
    assert sink.kinds(cid) == [
        "ClientConnected",
        "SessionSubscribed",
        "SessionSubscribed",
        "SessionSubscribed",
        "SessionUnsubscribed",
        "ClientDisconnected",
    ]


async def test_a_dropped_connection_is_a_disconnect_with_its_reason(
    source: tuple[MqttSource, RecordingSink], paho_clients: Callable[..., Client], mosquitto: int
) -> None:
    _src, sink = source
    cid = f"drop-{uuid.uuid4().hex[:6]}"
    dev = paho_clients(mosquitto, cid)
    await dev.connect()
    await sink.wait_for(ClientConnected, clientid=cid)
    await dev.drop()
    disconnected = await sink.wait_for(ClientDisconnected, clientid=cid)
    assert disconnected.reason in ("closed", "socket_error")


async def test_the_bridge_does_not_report_its_own_session(source: tuple[MqttSource, RecordingSink]) -> None:
    src, sink = source
    assert not sink.find(clientid=src.upstream.clientid)


def test_log_line_formats() -> None:
    from bridge.brokers.external.mqtt.mosquitto_log import MosquittoLog

    log = MosquittoLog("n", "me")
    e = log.parse(
        "$SYS/broker/log/N", b"1700000000: New client connected from 10.0.0.5:41000 as c 1 (p5, c1, k30, u'bob')."
    )
    assert isinstance(e, ClientConnected) and (e.clientid, e.username, e.peername, e.timestamp) == (
        "c 1",
        "bob",
        "10.0.0.5:41000",
        1700000000.0,
    )
    e = log.parse("$SYS/broker/log/N", b"1700000001: Client c 1 has exceeded timeout, disconnecting.")
    assert isinstance(e, ClientDisconnected) and e.reason == "keepalive_timeout" and e.username == "bob"
    assert e.proto_ver == 5  # from the connect line's "p5"
    assert log.parse("$SYS/broker/log/N", b"1700000001: New connection from 10.0.0.5:41000 on port 1883.") is None
    assert log.parse("$SYS/broker/log/M/subscribe", b"1700000002: me 1 x/#") is None  # the bridge itself


def test_protocol_level_of_each_connect_line() -> None:
    """Mosquitto 2.0.11 logs p1 / p2 / p5 for `mosquitto_pub -V mqttv31 / mqttv311 / mqttv5`."""
    from bridge.brokers.external.mqtt.mosquitto_log import MosquittoLog

    log = MosquittoLog("n", "me")
    for proto, level in (("p1", 3), ("p2", 4), ("p5", 5), ("p9", 4)):
        line = f"1700000000: New client connected from 10.0.0.5:41000 as {proto}c ({proto}, c0, k30)."
        connected = log.parse("$SYS/broker/log/N", line.encode())
        assert isinstance(connected, ClientConnected) and connected.proto_ver == level
        subscribed = log.parse("$SYS/broker/log/M/subscribe", f"1700000001: {proto}c 1 x/#".encode())
        assert isinstance(subscribed, SessionSubscribed) and subscribed.proto_ver == level
        unsubscribed = log.parse("$SYS/broker/log/M/unsubscribe", f"1700000002: {proto}c x/#".encode())
        assert isinstance(unsubscribed, SessionUnsubscribed) and unsubscribed.proto_ver == level
