"""The embedded broker's TLS and WebSocket listeners (docs/security.md#5-tls-and-client-certificates, #6-websocket-browsers-mqttjs), with real clients.

Certificates are made per module with openssl (support/tls.py): a CA, a server certificate for
127.0.0.1, client certificates it signed, and one a second CA signed (the wrong one). paho-mqtt
speaks MQTT over TLS, over WebSocket (its `websockets` transport, path /mqtt) and over both;
every test publishes through the listener and reads the message back, and the broker's events
(the sink) show who connected. Client certificates: a recording gate (the tests' own, the
real one is the auth package's) shows what the listener hands to the login.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bridge.brokers.embedded import EmbeddedBroker
from bridge.brokers.embedded.access import Login, OpenGate, Verdict
from bridge.brokers.embedded.codec import (
    MQTT_3_1_1,
    MQTT_5,
    Connect,
    Disconnect,
    Properties,
    Publish,
    ReasonCode,
    encode,
)
from bridge.brokers.embedded.listeners import Listener
from bridge.events import ClientConnected
from bridge.msgid import MsgIdGenerator
from support.mqtt import V5, V311, Client
from support.process import BridgeProcess, free_port
from support.sink import TIMEOUT, RecordingSink
from support.tls import Certificates, make_certificates, make_client_certificate

NODE = "test@127.0.0.1"


@dataclass(frozen=True)
class Pki:
    server: Certificates
    device: tuple[Path, Path]  # a client certificate with CN "device-42"
    stranger: tuple[Path, Path]  # CN "device-42" too, but signed by another CA


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    server = make_certificates(tmp_path_factory.mktemp("pki"))
    other = make_certificates(tmp_path_factory.mktemp("other-ca"))
    return Pki(
        server,
        make_client_certificate(server.ca.parent, server, "device-42"),
        make_client_certificate(other.ca.parent, other, "device-42"),
    )


class CertGate(OpenGate):
    """Records every login; with `cert_only`, lets in only clients whose certificate named them."""

    def __init__(self, cert_only: bool = False) -> None:
        self.logins: list[Login] = []
        self.cert_only = cert_only

    async def login(self, login: Login) -> Verdict:
        self.logins.append(login)
        if login.cert_cn is not None:
            return Verdict(True, username=login.cert_cn, authenticated=True)
        if self.cert_only:
            return Verdict(False, "login_not_authorized")
        return await super().login(login)


def listener(name: str, pki: Pki, **tls: Any) -> Listener:
    if name in ("tcp", "ws"):
        return Listener(name, "127.0.0.1", 0)
    return Listener(name, "127.0.0.1", 0, certfile=str(pki.server.cert), keyfile=str(pki.server.key), **tls)


@pytest.fixture
async def start() -> AsyncIterator[Callable[..., Awaitable[tuple[EmbeddedBroker, RecordingSink]]]]:
    started: list[EmbeddedBroker] = []

    async def start(*listeners: Listener, **kwargs: Any) -> tuple[EmbeddedBroker, RecordingSink]:
        sink = RecordingSink()
        broker = EmbeddedBroker("127.0.0.1:0", node=NODE, msgids=MsgIdGenerator(NODE), listeners=listeners, **kwargs)
        await broker.start(sink)
        started.append(broker)
        return broker, sink

    yield start
    for broker in started:
        await broker.stop()


def client_context(pki: Pki, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.server.ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


async def round_trip(subscriber: Client, publisher: Client, topic: str) -> None:
    """Subscribe, publish at QoS 1 and 0, and read both messages back in order."""
    assert await subscriber.subscribe(topic, 1) == [1]
    await publisher.publish(topic, b"qos1 \x00\xff", 1)
    await publisher.publish(topic, b"qos0", 0)
    first, second = await subscriber.message(), await subscriber.message()
    assert [(m.topic, m.payload, m.qos) for m in (first, second)] == [(topic, b"qos1 \x00\xff", 1), (topic, b"qos0", 0)]


# -- TLS ----------------------------------------------------------------------------------


async def test_tls_listener_carries_mqtt(start: Any, paho_clients: Any, pki: Pki) -> None:
    broker, sink = await start(listener("ssl", pki))
    port = broker.port_of("ssl")
    subscriber, publisher = (
        paho_clients(port, "tls-sub", tls=client_context(pki)),
        paho_clients(port, "tls-pub", tls=client_context(pki)),
    )
    assert (await subscriber.connect()).reason == 0
    assert (await publisher.connect()).reason == 0
    await round_trip(subscriber, publisher, "tls/one")
    # the plain TCP listener is still there beside it
    plain = paho_clients(broker.port, "plain")
    assert (await plain.connect()).reason == 0
    await sink.wait_for(ClientConnected, clientid="plain")


async def test_client_certificate_common_name_is_offered_as_the_username(
    start: Any, paho_clients: Any, pki: Pki
) -> None:
    gate = CertGate(cert_only=True)
    broker, sink = await start(
        listener("ssl", pki, cafile=str(pki.server.ca), verify_peer=True, peer_cert_as_username=True), gate=gate
    )
    device = paho_clients(broker.port_of("ssl"), "dev-a", tls=client_context(pki, pki.device))
    assert (await device.connect()).reason == 0
    connected = await sink.wait_for(ClientConnected, clientid="dev-a")
    assert connected.username == "device-42"
    assert [(login.listener, login.cert_cn, login.username) for login in gate.logins] == [("ssl", "device-42", None)]
    await round_trip(device, device, "devices/42")
    # on the plain listener, no certificate names anyone: the gate refuses (return code 5, which
    # paho reports as the 5.0 reason it stands for, 0x87 not authorized)
    plain = paho_clients(broker.port, "dev-b")
    assert (await plain.connect()).reason == 0x87
    assert gate.logins[-1].cert_cn is None and gate.logins[-1].listener == "tcp"


async def test_a_user_name_ban_holds_for_the_name_a_client_certificate_gives(
    start: Any, paho_clients: Any, pki: Pki, tmp_path: Path
) -> None:
    """broker.bans_file read at start: the user name "device-42" is banned; the device whose
    certificate gives that name is refused (3.1.1: 5, paho's 0x87; 5.0: 0x8A banned)."""
    bans = tmp_path / "bans.json"
    bans.write_text('[{"as": "username", "who": "device-42", "reason": "stolen", "by": "ops", "at": 1, "until": null}]')
    broker, _sink = await start(
        listener("ssl", pki, cafile=str(pki.server.ca), verify_peer=True, peer_cert_as_username=True),
        gate=CertGate(cert_only=True),
        bans_file=str(bans),
    )
    port = broker.port_of("ssl")
    assert (await paho_clients(port, "dev-a", tls=client_context(pki, pki.device)).connect()).reason == 0x87
    assert (await paho_clients(port, "dev-b", tls=client_context(pki, pki.device), version=V5).connect()).reason == 0x8A
    assert broker.refused["banned"] == 2


async def test_certificate_is_not_a_username_unless_asked(start: Any, paho_clients: Any, pki: Pki) -> None:
    gate = CertGate()
    broker, sink = await start(listener("ssl", pki, cafile=str(pki.server.ca), verify_peer=True), gate=gate)
    device = paho_clients(broker.port_of("ssl"), "dev-c", tls=client_context(pki, pki.device))
    assert (await device.connect()).reason == 0
    connected = await sink.wait_for(ClientConnected, clientid="dev-c")
    assert connected.username is None
    assert gate.logins[0].cert_cn is None


async def tls_connect_answer(port: int, context: ssl.SSLContext) -> bytes:
    """CONNECT over TLS; what the broker sent back before the connection ended (b"" for none).
    A refused client certificate shows as an alert on the client's first read (TLS 1.3)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except (ssl.SSLError, ConnectionError):
        return b""
    try:
        writer.write(encode(Connect(client_id="intruder", keepalive=30), MQTT_3_1_1))
        async with asyncio.timeout(TIMEOUT):
            return await reader.read(4)
    except (ssl.SSLError, ConnectionError):
        return b""
    finally:
        writer.close()


async def test_wrong_or_missing_client_certificate_is_refused(start: Any, paho_clients: Any, pki: Pki) -> None:
    gate = CertGate()
    broker, sink = await start(
        listener("ssl", pki, cafile=str(pki.server.ca), verify_peer=True, peer_cert_as_username=True), gate=gate
    )
    port = broker.port_of("ssl")
    assert await tls_connect_answer(port, client_context(pki, pki.stranger)) == b""  # same CN, another CA
    assert await tls_connect_answer(port, client_context(pki)) == b""  # no certificate at all
    assert gate.logins == []  # neither got as far as a CONNECT
    # the right certificate still gets in: the CONNACK (return code 0)
    assert await tls_connect_answer(port, client_context(pki, pki.device)) == b"\x20\x02\x00\x00"
    assert [e.clientid for e in sink.find(ClientConnected)] == ["intruder"]


async def test_a_5_0_disconnect_from_the_broker_reaches_a_tls_client(
    start: Any, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """TLS has no half-close: the broker's DISCONNECT (here 0x94, a topic alias over the
    maximum) is written, then the connection ends (write_eof used to raise in the protocol
    callback: asyncio logged a fatal error and tore the connection down)."""
    broker, _ = await start(listener("ssl", pki))
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port_of("ssl"), ssl=client_context(pki))
    try:
        writer.write(encode(Connect(client_id="alias", protocol_level=MQTT_5, keepalive=30), MQTT_5))
        async with asyncio.timeout(TIMEOUT):
            first, size = await reader.readexactly(2)
            assert first == 0x20 and size < 128  # CONNACK, its properties in one length byte
            assert (await reader.readexactly(size))[:2] == b"\x00\x00"  # accepted
        publish = Publish("t", b"x", 0, False, False, 0, Properties(topic_alias=65))
        writer.write(encode(publish, MQTT_5))
        async with asyncio.timeout(TIMEOUT):
            data = await reader.read()  # everything up to the end of the stream
        assert data == encode(Disconnect(ReasonCode.TOPIC_ALIAS_INVALID), MQTT_5)
    finally:
        writer.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


# -- WebSocket ------------------------------------------------------------------------------


@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5.0"])
async def test_websocket_listener_carries_mqtt(start: Any, paho_clients: Any, pki: Pki, v5: bool) -> None:
    gate = CertGate()
    broker, sink = await start(listener("ws", pki), gate=gate)
    port = broker.port_of("ws")
    subscriber, publisher = (
        paho_clients(port, "ws-sub", websocket=True, version=V5 if v5 else V311),
        paho_clients(port, "ws-pub", websocket=True, version=V5 if v5 else V311),
    )
    assert (await subscriber.connect()).reason == 0
    assert (await publisher.connect()).reason == 0
    await round_trip(subscriber, publisher, "ws/one")
    assert {login.listener for login in gate.logins} == {"ws"}
    connected = await sink.wait_for(ClientConnected, clientid="ws-pub")
    assert connected.proto_ver == (5 if v5 else 4)
    # a message too large for one small frame arrives whole (paho sends it in one frame, the
    # broker's reply comes back in one too)
    big = bytes(range(256)) * 1000
    await publisher.publish("ws/one", big, 1)
    assert (await subscriber.message()).payload == big


async def test_websocket_over_tls_with_client_certificate(start: Any, paho_clients: Any, pki: Pki) -> None:
    gate = CertGate(cert_only=True)
    broker, sink = await start(
        listener("wss", pki, cafile=str(pki.server.ca), verify_peer=True, peer_cert_as_username=True), gate=gate
    )
    device = paho_clients(broker.port_of("wss"), "wss-dev", websocket=True, tls=client_context(pki, pki.device))
    assert (await device.connect()).reason == 0
    assert (await sink.wait_for(ClientConnected, clientid="wss-dev")).username == "device-42"
    assert [(login.listener, login.cert_cn) for login in gate.logins] == [("wss", "device-42")]
    await round_trip(device, device, "wss/one")


# -- as a user runs it ------------------------------------------------------------------------


async def test_a_bridge_process_opens_every_configured_listener(paho_clients: Any, pki: Pki, tmp_path: Path) -> None:
    """`hookbridge run` (uvloop's event loop) with ssl, ws and wss from the config file: one
    message published over each listener reaches a subscriber on plain TCP."""
    ports = {name: free_port() for name in ("ssl", "ws", "wss")}
    files = f"certfile = {pki.server.cert}\n{{key}}.keyfile = {pki.server.key}\n{{key}}.cafile = {pki.server.ca}\n"
    extra = "".join(
        f"broker.listener.{name} = 127.0.0.1:{port}\n"
        + (f"broker.listener.{name}." + files.format(key=f"broker.listener.{name}") if name != "ws" else "")
        for name, port in ports.items()
    )
    bridge = BridgeProcess(tmp_path, pools="", rules="", extra=extra)
    try:
        await asyncio.to_thread(bridge.start)
        subscriber = paho_clients(bridge.mqtt_port, "proc-sub")
        assert (await subscriber.connect()).reason == 0
        assert await subscriber.subscribe("proc/#", 1) == [1]
        for name, port in ports.items():
            tls = client_context(pki) if name != "ws" else None
            publisher = paho_clients(port, f"proc-{name}", websocket=name != "ssl", tls=tls)
            assert (await publisher.connect()).reason == 0, name
            await publisher.publish(f"proc/{name}", name.encode(), 1)
            message = await subscriber.message()
            assert (message.topic, message.payload) == (f"proc/{name}", name.encode())
    finally:
        await asyncio.to_thread(bridge.stop)
