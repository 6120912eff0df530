"""An MQTT client on a bare socket, for what a well-behaved library will not do: withhold acks,
skip PINGREQ, close without DISCONNECT, a zero-length client id with a persistent session, and raw
bytes for what no encoder will produce (malformed packets). Packets are encoded and the broker's
answers decoded by the project's codec (`bridge.brokers.embedded.codec`)."""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from dataclasses import fields
from typing import Any

from bridge.brokers.embedded.codec import (
    EMPTY,
    MQTT_3_1_1,
    Connect,
    Decoder,
    Packet,
    Properties,
    Subscribe,
    Subscription,
    Will,
    encode,
)
from support.frames import Frame, take_frame

TIMEOUT = 5.0


def brief(packet: Any) -> str:
    """A packet with only its fields that differ from their defaults, for assertion messages."""
    shown = [f"{f.name}={getattr(packet, f.name)!r}" for f in fields(packet) if getattr(packet, f.name) != f.default]
    return f"{type(packet).__name__}({', '.join(shown)})"


class RawClient:
    """An MQTT client on a bare socket: sends what it is told (packets encoded by `bridge.brokers.embedded.codec`
    at `level`, or raw bytes), reads the broker's packets one by one with a client-side decoder.

    The socket is read with `loop.sock_recv`, not a StreamReader: a broker that sends DISCONNECT
    and then resets the connection must still show the DISCONNECT (the kernel hands out data
    received before a reset; a StreamReader raises the reset first)."""

    def __init__(self, sock: socket.socket, level: int = MQTT_3_1_1) -> None:
        self.sock = sock
        self.level = level
        self._decoder = Decoder(level=level, role="client")
        self._received: deque[Packet] = deque()
        self._frames = bytearray()  # read but not yet cut into frames (recv_frame)
        self._closed = False

    @classmethod
    async def open(cls, port: int, level: int = MQTT_3_1_1) -> RawClient:
        """A TCP connection to the broker, nothing sent yet."""
        sock = socket.socket()
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        return cls(sock, level)

    @classmethod
    async def connect(
        cls,
        port: int,
        client_id: str,
        *,
        clean_session: bool = True,
        keepalive: int = 60,
        will: Will | None = None,
        level: int = MQTT_3_1_1,
        properties: Properties = EMPTY,
        timeout: float = TIMEOUT,
    ) -> tuple[RawClient, Packet | None]:
        """Open a connection and send CONNECT; returns the client and the CONNACK (None if closed),
        waited for up to `timeout` seconds."""
        client = await cls.open(port, level)
        await client.send(Connect(client_id, level, clean_session, keepalive, will=will, properties=properties))
        return client, await client.recv(timeout)

    @property
    def local_port(self) -> int:
        return int(self.sock.getsockname()[1])

    async def send(self, packet: Packet) -> None:
        await self.send_bytes(encode(packet, self.level))

    async def send_bytes(self, data: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def recv(self, timeout: float = TIMEOUT) -> Any:
        """The next packet, or None when the broker closed (or reset) the connection. Typed Any:
        each test knows which packet it expects and reads its fields."""
        async with asyncio.timeout(timeout):
            while not self._received:
                data = await self._read()
                if not data:
                    return None
                self._received.extend(self._decoder.feed(data))
            return self._received.popleft()

    async def recv_frame(self, timeout: float = TIMEOUT) -> Frame | None:
        """The next packet undecoded (support.frames: its type, flags and body bytes), for what the
        codec would refuse and for the broker suite; None when the broker closed (or reset) the
        connection. One client reads either frames or decoded packets (`recv`), not both."""
        async with asyncio.timeout(timeout):
            while (frame := take_frame(self._frames)) is None:
                data = await self._read()
                if not data:
                    return None
                self._frames += data
            return frame

    async def next_frame(self, timeout: float = TIMEOUT) -> Frame:
        """The next packet undecoded; the connection closing instead fails the test."""
        frame = await self.recv_frame(timeout)
        assert frame is not None, "the broker closed the connection"
        return frame

    async def frames_until_closed(self, timeout: float = TIMEOUT) -> list[Frame]:
        """Every packet, undecoded, until the broker closes the connection."""
        frames = []
        while (frame := await self.recv_frame(timeout)) is not None:
            frames.append(frame)
        return frames

    async def _read(self) -> bytes:
        """What the socket holds next; b"" once the broker closed or reset the connection."""
        if self._closed:
            return b""
        try:
            data = await asyncio.get_running_loop().sock_recv(self.sock, 65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self._closed = True
        return data

    async def until_closed(self, timeout: float = TIMEOUT) -> list[Any]:
        """Every packet the broker sends until it closes the connection; fails if it does not
        close within `timeout` (counted from the call, not per packet)."""
        packets = []
        try:
            async with asyncio.timeout(timeout):
                while (packet := await self.recv(timeout)) is not None:
                    packets.append(packet)
        except TimeoutError:
            sent = [brief(packet) for packet in packets]
            raise AssertionError(f"still open after {timeout} s; the broker sent {sent}") from None
        return packets

    async def subscribe(self, packet_id: int, *topics: tuple[str, int]) -> Any:
        """Send SUBSCRIBE and return its SUBACK (no other packet may come first)."""
        await self.send(Subscribe(packet_id, [Subscription(topic, qos) for topic, qos in topics]))
        return await self.recv()

    def abort(self) -> None:
        """Drop the connection without DISCONNECT."""
        self.sock.close()
