"""No client's flood delays another client's login (docs/security.md#what-each-limit-bounds): each
connection has one budget per loop turn, whatever it sends (connection.TURN_PACKETS packets
handled, connection.TURN_BYTES bytes written in answer); past it the rest of what it sent waits
unread while the others are served.

The flooder is its own process (bench/flooder.py), reading what the broker answers or
never reading it. Meanwhile another client logs in (CONNECT, then PINGREQ). What is asserted
is not how long that takes (a loaded machine is slow for everyone; the 10 s bound only keeps a
hang from hanging the suite) but how much of the flood the broker handled while it did: with a
budget per turn that is a few turns' worth; without one, a single turn handled a whole 256 KB
read (128,000 PINGREQs) and the login waited behind tens of them. And the flooder's connection
holds bounded memory: its unsent output, its inbox and the bytes its decoder holds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bridge.brokers.embedded import EmbeddedBroker
from bridge.brokers.embedded.codec import (
    MQTT_3_1_1,
    MQTT_5,
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Pingresp,
    ReasonCode,
    Subscribe,
    Subscription,
    encode,
    wire,
)
from bridge.brokers.embedded.connection import INBOX_SIZE, TURN_BYTES, TURN_PACKETS
from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.listeners import Listener
from bridge.msgid import MsgIdGenerator
from support.mqtt import wait_until
from support.raw import RawClient
from support.sink import RecordingSink
from tests.integration.test_embedded_websocket_input import UPGRADE, frame

ROOT = Path(__file__).resolve().parents[2]
NODE = "fair@127.0.0.1"
OUTPUT_BOUND = 256 << 10  # broker.max_output_bytes: a non-reading flooder reaches it quickly
READ_SIZE = 256 << 10  # the most one read of a TCP transport takes (asyncio's selector transport)
HANG_GUARD = 10.0  # seconds; not a measure: a login that never completes fails here, not later
LOGINS = 5
# Packets of the flood the broker may handle while another client logs in: the login takes a
# handful of loop turns, each giving the flooder at most TURN_PACKETS. Before the budget, one
# turn handled everything one read held: 128,000 PINGREQs.
FLOOD_PER_LOGIN = 40 * TURN_PACKETS
KINDS = ["pingreq", "pubrec", "pubrel", "pubcomp", "subscribe", "unsubscribe", "auth"]


@pytest.fixture
async def broker() -> AsyncIterator[EmbeddedBroker]:
    broker = EmbeddedBroker(
        "127.0.0.1:0",
        node=NODE,
        msgids=MsgIdGenerator(NODE),
        limits=Limits(max_output_bytes=OUTPUT_BOUND),
    )
    await broker.start(RecordingSink())
    yield broker
    await broker.stop()


def start_flooder(port: int, kind: str, reading: str, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "bench.flooder", str(port), kind, reading, *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def stop_flooder(flooder: subprocess.Popen[bytes]) -> str:
    if flooder.poll() is None:
        flooder.send_signal(signal.SIGKILL)
    _, err = flooder.communicate(timeout=30)
    return err.decode(errors="replace")


class Peaks:
    """The most any flooding connection held, sampled every loop turn or so."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        self.core = broker._broker  # the running core: its connections
        self.output = self.inbox = self.decoder = 0

    def sample(self) -> None:
        for channel in list(self.core.connections):
            conn = channel.wire  # its Connection: the socket side
            transport = conn.transport
            if transport is not None and not transport.is_closing():
                self.output = max(self.output, transport.get_write_buffer_size())
            self.inbox = max(self.inbox, len(conn.inbox or ()))
            self.decoder = max(self.decoder, conn.decoder.buffered)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.sample()
            await asyncio.sleep(0.001)


async def login(port: int, client_id: str) -> float:
    """CONNECT and a PINGREQ round trip; the seconds it took."""
    started = time.monotonic()
    async with asyncio.timeout(HANG_GUARD):
        client, connack = await RawClient.connect(port, client_id)
        try:
            assert isinstance(connack, Connack) and connack.reason_code == 0, connack
            await client.send(Pingreq())
            assert await client.recv(HANG_GUARD) == Pingresp()
        finally:
            client.abort()
    return time.monotonic() - started


@pytest.mark.parametrize("reading", ["read", "noread"])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_flood_of_any_packet_type_leaves_logins_their_turn(
    broker: EmbeddedBroker, kind: str, reading: str
) -> None:
    core = broker._broker
    flooder = start_flooder(broker.port, kind, reading, "--level", "5")
    peaks, stop = Peaks(broker), asyncio.Event()
    watcher = asyncio.get_running_loop().create_task(peaks.run(stop))
    try:
        # the flood is under way: the broker has handled a good part of one read of it
        await wait_until(lambda: core.traffic.packets_received > 4 * TURN_PACKETS, 60, "the flood to start")
        handled, took = [], []
        for number in range(LOGINS):
            before = core.traffic.packets_received
            took.append(await login(broker.port, f"probe-{number}"))
            handled.append(core.traffic.packets_received - before)
        assert flooder.poll() is None, "the flooder stopped"
    finally:
        stop.set()
        await watcher
        errors = stop_flooder(flooder)
    print(f"{kind} {reading}: login {max(took) * 1000:.0f} ms at most; flood packets per login {handled}")
    assert "Traceback" not in errors, errors
    assert max(handled) <= FLOOD_PER_LOGIN, (handled, took)
    assert peaks.output <= OUTPUT_BOUND + TURN_BYTES + READ_SIZE, peaks.output
    assert peaks.inbox <= INBOX_SIZE + TURN_PACKETS, peaks.inbox
    assert peaks.decoder <= 2 * READ_SIZE, peaks.decoder


async def test_a_huge_packet_is_refused_at_the_item_past_its_bound(broker: EmbeddedBroker) -> None:
    """150,000 empty user properties (750 KB, under max_packet_size) and a SUBSCRIBE of 20,000
    filters: each connection is closed with DISCONNECT 0x95, counted, and the broker serves
    logins as before (the decoding stopped at the 1,025th property, the 10,001st filter)."""
    port = broker.port
    block = b"\x26\x00\x00\x00\x00" * 150_000
    body = wire.string("t") + wire.varint(len(block)) + block + b"x"
    huge_publish = bytes([0x30]) + wire.varint(len(body)) + body
    many_filters = encode(Subscribe(1, [Subscription(f"f/{i}", 0) for i in range(20_000)]), MQTT_5)
    for data, counted in ((huge_publish, "user_properties"), (many_filters, "subscribe_entries")):
        client, connack = await RawClient.connect(port, f"huge-{counted}", level=MQTT_5)
        assert isinstance(connack, Connack) and connack.reason_code == 0
        await client.send_bytes(data)
        assert await client.until_closed(HANG_GUARD) == [Disconnect(ReasonCode.PACKET_TOO_LARGE)]
        assert broker.refused[counted] == 1
        await login(port, f"after-{counted}")


async def test_a_websocket_flood_gets_one_budget_per_loop_turn_however_many_frames_one_read_holds() -> None:
    """One TCP read of a WebSocket connection may hold hundreds of frames, each handed to the
    connection in turn: past the turn's budget they wait in the decoder for the next turn.
    Counted per loop turn by a callback that runs once in every turn."""
    broker = EmbeddedBroker(
        "127.0.0.1:0",
        node=NODE,
        msgids=MsgIdGenerator(NODE),
        limits=Limits(max_output_bytes=OUTPUT_BOUND),
        listeners=[Listener("ws", "127.0.0.1", 0)],
    )
    await broker.start(RecordingSink())
    loop = asyncio.get_running_loop()
    core, most, ticking = broker._broker, [0], [True]
    last = [0]

    def tick() -> None:  # runs once per loop turn: the packets the broker handled in the last one
        now = core.traffic.packets_received
        most[0] = max(most[0], now - last[0])
        last[0] = now
        if ticking[0]:
            loop.call_soon(tick)

    raw = socket.socket()
    raw.setblocking(False)
    try:
        await loop.sock_connect(raw, ("127.0.0.1", broker.port_of("ws")))
        await loop.sock_sendall(raw, UPGRADE.format(path="/mqtt").encode())
        response = b""
        while b"\r\n\r\n" not in response:
            response += await loop.sock_recv(raw, 1)
        assert response.startswith(b"HTTP/1.1 101")
        await loop.sock_sendall(raw, frame(0x2, encode(Connect("wsflood", MQTT_3_1_1, True, 0), MQTT_3_1_1)))
        connack = await loop.sock_recv(raw, 64)
        assert connack[-4:] == b"\x20\x02\x00\x00", connack
        pings = frame(0x2, encode(Pingreq(), MQTT_3_1_1) * 60)  # 60 PINGREQs a frame
        flood = pings * 2000  # 120,000 PINGREQs, 250 KB: a read holds hundreds of frames
        last[0] = core.traffic.packets_received
        loop.call_soon(tick)
        sender = loop.create_task(loop.sock_sendall(raw, flood))
        await wait_until(sender.done, 60, "the flood sent")
        await wait_until(lambda: core.traffic.packets_received >= 120_000, 60, "the flood handled")
    finally:
        ticking[0] = False
        raw.close()
        await broker.stop()
    assert most[0] <= 2 * TURN_PACKETS, most[0]
