"""A client that sends without reading cannot grow the broker's memory (docs/operations.md#memory-of-the-embedded-broker-what-bounds-it): past
`broker.max_output_bytes` written and not taken, the broker stops reading from it (PUBACKs,
PINGRESPs, pongs no longer pile up), counts the pause, serves the other clients meanwhile, and
answers everything once the client reads again.

The kernel's socket buffers would absorb megabytes before the broker's own buffer grows, so the
test shrinks them on both ends of the flooding connection: what is measured is the bytes the
broker holds in its transport for that connection, not timing.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import struct
from typing import Any

import pytest

from bridge.app import Bridge
from bridge.brokers.embedded import EmbeddedBroker, tcp
from bridge.brokers.embedded.codec import MQTT_3_1_1, Connack, Connect, Pingreq, Pingresp, Puback, Publish, encode
from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.listeners import Listener
from bridge.msgid import MsgIdGenerator
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import wait_until
from support.raw import RawClient
from support.sink import RecordingSink
from tests.integration.test_embedded_websocket_input import UPGRADE, frame, still_serves

BOUND = 32 << 10  # broker.max_output_bytes
CHUNK = 8 << 10  # bytes of PINGREQs per send
PINGS = 50 * (CHUNK // 2)  # 204,800: 400 KB of PINGRESP owed, more than ten times the bound
# What may pass the bound: the answers to what was read before the pause took effect (a read
# from the shrunken socket buffer, and the window the connection had already advertised).
SLACK = 96 << 10


def paused(bridge: Bridge) -> float:
    found = re.search(
        r'^hookbridge_broker_output_paused_total\{pool="embedded"\} (\S+)$', bridge.metrics.render(), re.M
    )
    assert found, "hookbridge_broker_output_paused_total is missing"
    return float(found[1])


def server_side(bridge: Bridge, client: RawClient) -> Any:
    """The broker's Connection for `client` (matched by the client's port)."""
    broker = bridge.broker._broker  # the running core: its clients (channels), each on its Connection (wire)
    port = client.local_port
    return next(c.wire for c in broker.connections if c.peer.address.endswith(f":{port}"))


async def flooder(bridge: Bridge, client_id: str) -> tuple[RawClient, Any]:
    """A connected client, and its Connection in the broker, with small socket buffers on both
    ends: the kernel absorbs a few KB of what the broker writes, not megabytes."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window it announces
    raw.setblocking(False)
    await asyncio.get_running_loop().sock_connect(raw, ("127.0.0.1", mqtt_port(bridge)))
    flood = RawClient(raw)
    await flood.send(Connect(client_id, MQTT_3_1_1, True, 0))
    assert isinstance(await flood.recv(), Connack)
    conn = server_side(bridge, flood)
    sock = conn.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 10)
    return flood, conn


# broker.listener.tcp.transport: the broker's own (tcp.py) and the event loop's
TRANSPORTS = ("broker", "loop")


def transport_config(transport: str) -> str:
    return f"broker.listener.tcp.transport = {transport}\n"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_pingreq_flood_without_reading_stays_bounded(make_bridge: BridgeFactory, transport: str) -> None:
    bridge = await make_bridge(
        rules="", extra_config=f"broker.max_output_bytes = {BOUND // 1024}KB\n" + transport_config(transport)
    )
    port = mqtt_port(bridge)
    assert paused(bridge) == 0
    flood, conn = await flooder(bridge, "flood")
    assert isinstance(conn.transport, tcp.SocketTransport) == (transport == "broker")

    peak = 0
    stop = asyncio.Event()

    async def watch() -> None:  # the most the broker held for the flooder
        nonlocal peak
        while not stop.is_set():
            transport = conn.transport
            if transport is not None and not transport.is_closing():
                peak = max(peak, transport.get_write_buffer_size())
            await asyncio.sleep(0)

    loop = asyncio.get_running_loop()
    pings = encode(Pingreq(), MQTT_3_1_1) * (CHUNK // 2)
    sent = 0

    async def send_all() -> None:
        nonlocal sent
        for _ in range(PINGS // (CHUNK // 2)):
            await loop.sock_sendall(flood.sock, pings)
            sent += CHUNK // 2

    watcher = loop.create_task(watch())
    sender = loop.create_task(send_all())
    try:
        # the broker stops reading once the bound is passed
        await wait_until(lambda: paused(bridge) > 0, 30, "a pause counted")
        assert not conn.transport.is_reading()  # what the flooder still sends waits in its socket
        assert conn.channel.reason is None  # not closed for it

        # the other clients are served meanwhile
        other, connack = await RawClient.connect(port, "other")
        assert isinstance(connack, Connack) and connack.reason_code == 0
        await other.send(Publish("t", b"x", qos=1, packet_id=1))
        assert await other.recv() == Puback(1)
        await other.send(Pingreq())
        assert await other.recv() == Pingresp()
        other.abort()

        # the client reads at last: every PINGREQ it sent is answered, in full
        received = 0
        async with asyncio.timeout(60):
            while not sender.done() or received < sent * 2:
                data = await loop.sock_recv(flood.sock, 1 << 16)
                assert data, "the broker closed the flooding connection"
                assert set(data) <= {0xD0, 0x00}  # PINGRESPs only
                received += len(data)
        await sender
        assert sent == PINGS and received == 2 * PINGS
    finally:
        stop.set()
        await watcher
        sender.cancel()
        flood.abort()
    assert peak <= BOUND + SLACK, peak
    assert paused(bridge) >= 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_reset_mid_flood_is_logged(
    make_bridge: BridgeFactory, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    """A flood cut by a connection reset left nothing in the log (asyncio reports a reset only in
    debug mode): the broker now says which client and why."""
    bridge = await make_bridge(rules="", extra_config="broker.max_output_bytes = 16KB\n" + transport_config(transport))
    flood, conn = await flooder(bridge, "reset-me")
    with caplog.at_level(logging.INFO, logger="bridge.brokers.embedded"):
        sender = asyncio.get_running_loop().create_task(flood.send_bytes(encode(Pingreq(), MQTT_3_1_1) * 200_000))
        await wait_until(lambda: conn.writing_paused, 30, "reading paused")
        # closing with unread data sends a reset
        flood.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sender.cancel()
        flood.sock.close()
        await wait_until(lambda: conn.channel.reason is not None, 30, "the connection ended")
    lines = [r.getMessage() for r in caplog.records]
    assert (
        "client 'reset-me': connection lost: Connection reset by peer (while its unread output held reading paused)"
        in lines
    ), lines


async def test_websocket_ping_flood_without_reading_stays_bounded() -> None:
    """The WebSocket layer answers pings with pongs on its own: past the bound those stop too,
    since the connection is no longer read."""
    node = "test@127.0.0.1"
    broker = EmbeddedBroker(
        "127.0.0.1:0",
        node=node,
        msgids=MsgIdGenerator(node),
        limits=Limits(max_output_bytes=BOUND),
        listeners=[Listener("ws", "127.0.0.1", 0)],
    )
    await broker.start(RecordingSink())
    loop = asyncio.get_running_loop()
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.setblocking(False)
    sender: asyncio.Task[None] | None = None
    try:
        await loop.sock_connect(raw, ("127.0.0.1", broker.port_of("ws")))
        await loop.sock_sendall(raw, UPGRADE.format(path="/mqtt").encode())
        response = b""
        while b"\r\n\r\n" not in response:
            response += await loop.sock_recv(raw, 1)  # byte by byte: nothing after the head is taken
        assert response.startswith(b"HTTP/1.1 101")
        conn = next(iter(broker._broker.connections)).wire  # the running core's only connection
        sock = conn.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 10)
        pings = frame(0x9, b"p" * 125) * 4000  # 500 KB of pongs owed
        peak = 0

        def sample() -> None:
            nonlocal peak
            peak = max(peak, conn.transport.get_write_buffer_size())

        sender = loop.create_task(loop.sock_sendall(raw, pings))
        await wait_until(lambda: (sample(), broker.output_pauses > 0)[1], 30, "a pause counted")
        assert not conn.transport.is_reading() and conn.channel.reason is None
        await still_serves(broker, "wsflood")
        # reading at last: every ping gets its pong
        received = 0
        async with asyncio.timeout(60):
            while not sender.done() or received < 4000 * 127:
                sample()
                data = await loop.sock_recv(raw, 1 << 16)
                assert data
                received += len(data)
        assert received == 4000 * 127  # a pong of 125 bytes is 127 bytes on the wire
    finally:
        if sender is not None:
            sender.cancel()
        raw.close()
        await broker.stop()
    assert peak <= BOUND + SLACK, peak
