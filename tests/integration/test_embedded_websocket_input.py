"""The WebSocket listener's input at the byte level: handshakes and frames written here by hand.

A bad upgrade request gets an HTTP error response, a bad frame a close frame with the RFC 6455
code; either way the connection ends, the refusal is counted where it is an MQTT one, and the
broker goes on serving (a paho client round-trips after every case). MQTT packets need not
line up with frames (MQTT 5.0 section 6.0): one split over frames, or two in one, work.
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from collections.abc import AsyncIterator

import pytest

from bridge.brokers.embedded import EmbeddedBroker
from bridge.brokers.embedded.codec import MQTT_3_1_1, Connect, Pingreq, encode
from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.listeners import Listener
from bridge.msgid import MsgIdGenerator
from support.mqtt import Client
from support.sink import TIMEOUT, RecordingSink
from tests.integration.test_embedded_listeners import round_trip

NODE = "test@127.0.0.1"
MAX_PACKET_SIZE = 4096
KEY = base64.b64encode(os.urandom(16)).decode()
UPGRADE = (
    "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    f"Sec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n"
)
BINARY, TEXT, CLOSE = 0x2, 0x1, 0x8


@pytest.fixture
async def broker() -> AsyncIterator[EmbeddedBroker]:
    broker = EmbeddedBroker(
        "127.0.0.1:0",
        node=NODE,
        msgids=MsgIdGenerator(NODE),
        limits=Limits(max_packet_size=MAX_PACKET_SIZE),
        listeners=[Listener("ws", "127.0.0.1", 0)],
    )
    await broker.start(RecordingSink())
    yield broker
    await broker.stop()


def frame(opcode: int, payload: bytes, *, fin: bool = True, masked: bool = True, length: int | None = None) -> bytes:
    """A client frame; `length` overrides the announced payload length."""
    size = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | opcode])
    mask_bit = 0x80 if masked else 0
    if size < 126:
        head += bytes([mask_bit | size])
    elif size < 1 << 16:
        head += bytes([mask_bit | 126]) + struct.pack(">H", size)
    else:
        head += bytes([mask_bit | 127]) + struct.pack(">Q", size)
    if not masked:
        return head + payload
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Raw:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Raw:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def http(self, request: bytes) -> tuple[int, dict[str, str]]:
        """Send `request`; the response's status and headers (names lower-cased)."""
        self.writer.write(request)
        async with asyncio.timeout(TIMEOUT):
            head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *lines = head.decode().split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines if line)
        return int(status_line.split()[1]), {k.lower(): v for k, v in headers.items()}

    async def upgrade(self) -> None:
        status, headers = await self.http(UPGRADE.format(path="/mqtt").encode())
        assert (status, headers["sec-websocket-protocol"]) == (101, "mqtt")

    async def read_frame(self) -> tuple[int, bytes]:
        async with asyncio.timeout(TIMEOUT):
            first, second = await self.reader.readexactly(2)
            size = second & 0x7F
            if size == 126:
                (size,) = struct.unpack(">H", await self.reader.readexactly(2))
            elif size == 127:
                (size,) = struct.unpack(">Q", await self.reader.readexactly(8))
            return first & 0x0F, await self.reader.readexactly(size)

    async def closed(self) -> bool:
        """Whether the broker ends the connection (reads what is left until it does)."""
        async with asyncio.timeout(TIMEOUT):
            while await self.reader.read(65536):
                pass
        return True

    def close(self) -> None:
        self.writer.close()


async def still_serves(broker: EmbeddedBroker, name: str) -> None:
    port = broker.port_of("ws")
    subscriber, publisher = (
        Client(port, f"{name}-sub", websocket=True),
        Client(port, f"{name}-pub", websocket=True),
    )
    try:
        assert (await subscriber.connect()).reason == 0
        assert (await publisher.connect()).reason == 0
        await round_trip(subscriber, publisher, f"{name}/after")
    finally:
        await subscriber.close()
        await publisher.close()


# -- the upgrade ------------------------------------------------------------------------------

BAD_REQUESTS = {
    "another path": (UPGRADE.format(path="/other").encode(), 404),
    "plain HTTP GET": (b"GET /mqtt HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 426),
    "POST": (UPGRADE.format(path="/mqtt").replace("GET", "POST", 1).encode(), 405),
    "no key": (UPGRADE.format(path="/mqtt").replace(f"Sec-WebSocket-Key: {KEY}\r\n", "").encode(), 400),
    "only other subprotocols": (
        UPGRADE.format(path="/mqtt").replace("Protocol: mqtt", "Protocol: stomp").encode(),
        400,
    ),
    "MQTT without WebSocket": (encode(Connect(client_id="raw", keepalive=30), MQTT_3_1_1), 400),
    "binary garbage": (bytes(range(256)) + b"\r\n\r\n", 400),
    "a 20 KB header": (b"GET /mqtt HTTP/1.1\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n", 431),
    "a 20 KB request line": (b"GET /mqtt?" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n", 414),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
async def test_a_bad_upgrade_request_gets_an_http_error(broker: EmbeddedBroker, case: str) -> None:
    request, status = BAD_REQUESTS[case]
    raw = await Raw.open(broker.port_of("ws"))
    try:
        assert (await raw.http(request))[0] == status
        assert await raw.closed()
    finally:
        raw.close()
    await still_serves(broker, "after-bad-upgrade")


# -- frames -------------------------------------------------------------------------------------


async def test_packets_need_not_line_up_with_frames(broker: EmbeddedBroker) -> None:
    raw = await Raw.open(broker.port_of("ws"))
    try:
        await raw.upgrade()
        connect = encode(Connect(client_id="split", keepalive=30), MQTT_3_1_1)
        raw.writer.write(frame(BINARY, connect[:5], fin=False) + frame(0x0, connect[5:]))  # one packet, two frames
        assert await raw.read_frame() == (BINARY, b"\x20\x02\x00\x00")  # CONNACK
        ping = encode(Pingreq(), MQTT_3_1_1)
        raw.writer.write(frame(BINARY, ping + ping))  # two packets, one frame
        assert await raw.read_frame() == (BINARY, b"\xd0\x00")
        assert await raw.read_frame() == (BINARY, b"\xd0\x00")
        raw.writer.write(frame(0x9, b"hi"))  # a ping frame: answered with a pong, MQTT untouched
        assert await raw.read_frame() == (0xA, b"hi")
    finally:
        raw.close()


BAD_FRAMES = {
    # a frame announcing more than max_packet_size: refused from its header (1009), counted
    "oversized frame": (frame(BINARY, b"", length=MAX_PACKET_SIZE + 1), 1009, "packet_too_large"),
    # fragments of well-formed packets (PINGREQs), over max_packet_size together
    "oversized message": (
        frame(BINARY, b"\xc0\x00" * 1500, fin=False) + frame(0x0, b"\xc0\x00" * 1500),
        1009,
        "packet_too_large",
    ),
    "text frame": (frame(TEXT, encode(Pingreq(), MQTT_3_1_1)), 1003, "malformed"),
    "unmasked frame": (frame(BINARY, encode(Pingreq(), MQTT_3_1_1), masked=False), 1002, "malformed"),
    "reserved opcode": (bytes([0x83, 0x80]) + os.urandom(4), 1002, "malformed"),
}


@pytest.mark.parametrize("case", list(BAD_FRAMES))
async def test_a_bad_frame_closes_with_its_code(broker: EmbeddedBroker, case: str) -> None:
    data, code, reason = BAD_FRAMES[case]
    raw = await Raw.open(broker.port_of("ws"))
    try:
        await raw.upgrade()
        raw.writer.write(frame(BINARY, encode(Connect(client_id=f"bad-{len(case)}", keepalive=30), MQTT_3_1_1)))
        assert await raw.read_frame() == (BINARY, b"\x20\x02\x00\x00")
        raw.writer.write(data)
        opcode, payload = await raw.read_frame()
        while opcode == BINARY:  # the PINGRESPs of the fragment that was within the limit
            opcode, payload = await raw.read_frame()
        assert (opcode, struct.unpack(">H", payload[:2])[0]) == (CLOSE, code)
        assert await raw.closed()
    finally:
        raw.close()
    assert broker.refused[reason] == 1
    await still_serves(broker, "after-bad-frame")
