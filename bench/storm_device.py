"""One device of a timed reconnect storm (bench/reconnect_storm.py), as cheap for the bench's
process as a Python client can be.

On 2 cores the storm's clients and the broker share the machine, and a storm is only timed by the
broker while the clients need less CPU than it does. With the bench's general client
(bench/mqtt_clients.py: asyncio streams, a read under `wait_for` per packet, the project's codec
interpreted) 15,000 devices took as many CPU seconds as the storm lasted, for either broker: the
storm timed the clients, and the two brokers came out within a few per cent of each other
whichever was faster (docs/benchmarks.md#reconnect-storm).

So a device here is an `asyncio.Protocol`: its CONNECT is encoded before the storm starts, the
packets that come are cut by their fixed header in `data_received`, and each queued PUBLISH is
checked and acknowledged there, without a task switch. The checks are the general client's: an
accepted CONNACK, every queued message its own device's, once, in order, at QoS 1, and nothing
before the PINGRESP that follows the last PUBACK (a doubled delivery shows up there).
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

from bench.broker_servers import HOST
from bench.mqtt_clients import TIMEOUT
from bridge.brokers.embedded.codec import MQTT_3_1_1, Connect, encode

CONNACK, PUBLISH, PINGRESP = 2, 3, 13
PUBACK_HEADER = b"\x40\x02"
PINGREQ = b"\xc0\x00"
DISCONNECT = b"\xe0\x00"


def connect_packet(client_id: str, *, clean: bool, username: str | None, password: bytes | None) -> bytes:
    """A device's CONNECT (3.1.1, keepalive 0), encoded before the storm."""
    return encode(
        Connect(client_id=client_id, clean_start=clean, keepalive=0, username=username, password=password),
        MQTT_3_1_1,
    )


class StormDevice(asyncio.Protocol):
    """Connects with `connect`; `connack` is done with its session present flag; then, when
    `expected` (topic, payloads) is given, `done` with how many queued messages it took."""

    def __init__(self, name: str, connect: bytes, expected: tuple[bytes, list[bytes]] | None) -> None:
        loop = asyncio.get_running_loop()
        self.name, self._connect = name, connect
        self._topic, self._payloads = expected if expected is not None else (b"", [])
        self._queue = expected is not None
        self.connack: asyncio.Future[bool] = loop.create_future()
        self.done: asyncio.Future[int] = loop.create_future()
        self.taken = 0
        self._buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass of it
        self.transport.write(self._connect)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while len(buffer) >= 2:
            length, shift, at = 0, 0, 1
            while True:  # the remaining length: up to 4 bytes of 7 bits
                if at >= len(buffer):
                    return
                byte = buffer[at]
                length |= (byte & 0x7F) << shift
                at += 1
                if not byte & 0x80:
                    break
                shift += 7
                if shift > 21:
                    return self._fail(f"a remaining length of more than 4 bytes: {bytes(buffer[:5])!r}")
            if len(buffer) < at + length:
                return
            first, body = buffer[0], bytes(buffer[at : at + length])
            del buffer[: at + length]
            self._packet(first, body)

    def _packet(self, first: int, body: bytes) -> None:
        kind = first >> 4
        if kind == CONNACK and not self.connack.done():
            if len(body) != 2 or body[1] != 0:
                return self._fail(f"CONNACK {body!r} instead of an accepted one")
            self.connack.set_result(bool(body[0] & 1))
            if self._queue and not self._payloads:
                self._write(PINGREQ)
        elif kind == PUBLISH and self.connack.done() and self.taken < len(self._payloads):
            self._publish(first, body)
        elif kind == PINGRESP and self._queue and self.taken == len(self._payloads):
            if not self.done.done():
                self.done.set_result(self.taken)
        else:
            what = f"packet type {kind} ({body[:40]!r})"
            self._fail(f"{what} after {self.taken} of {len(self._payloads)} queued messages (delivered twice?)")

    def _publish(self, first: int, body: bytes) -> None:
        qos = (first >> 1) & 3
        size = int.from_bytes(body[:2], "big")
        topic, rest = body[2 : 2 + size], body[2 + size :]
        expected = self._payloads[self.taken]
        if qos != 1:
            return self._fail(f"{expected!r} arrived at QoS {qos}, subscribed at 1")
        packet_id, payload = rest[:2], rest[2:]
        if topic != self._topic or payload != expected:
            return self._fail(
                f"message {self.taken + 1} of {len(self._payloads)} should be {expected!r}: {topic!r} {payload!r}"
            )
        self.taken += 1
        self._write(PUBACK_HEADER + packet_id + (PINGREQ if self.taken == len(self._payloads) else b""))

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _fail(self, why: str) -> None:
        error = RuntimeError(f"{self.name}: {why}")
        for future in (self.connack, self.done):
            if not future.done():
                future.set_exception(error)
                break  # the other is not awaited yet: it fails when it is (the connection closes)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        error = ConnectionError(f"{self.name}: the broker closed the connection ({exc or 'EOF'})")
        for future in (self.connack, self.done):
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: `done` of a device that failed its CONNACK is never awaited

    async def close(self) -> None:
        """DISCONNECT and close (after the storm: untimed)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(DISCONNECT)
            self.transport.close()


def source_address(number: int) -> str:
    """The loopback address device `number` connects from: a thousand devices to each of
    127.0.1.1, 127.0.1.2, ...

    From one address, the fleet's connections and the TIME_WAIT ones the fleet's setup and the
    earlier storms leave (a minute each) filled most of Linux's ephemeral ports (28,232 by
    default): near the storm's end each connect() searched the port range for a free one in the
    kernel, the bench's process spent 0.75 s of a second in `connect()`, and the last thousand
    devices connected a second late whichever broker it was (no SYN was dropped: the kernel's
    ListenOverflows stayed 0). A real fleet comes from as many addresses as devices."""
    group = number // 1000
    return f"127.0.{1 + group // 254}.{1 + group % 254}"


async def reconnect(
    port: int, name: str, connect: bytes, expected: tuple[bytes, list[bytes]] | None, source: str
) -> tuple[StormDevice, float]:
    """A device connected from `source` and CONNACKed (its `done` still to come when `expected`),
    and the seconds its TCP handshake took (a second or more: its SYN was dropped and sent again)."""
    loop = asyncio.get_running_loop()
    began = time.perf_counter()
    device = StormDevice(name, connect, expected)
    async with asyncio.timeout(TIMEOUT):
        await loop.create_connection(lambda: device, HOST, port, local_addr=(source, 0))
        tcp = time.perf_counter() - began
        try:
            await device.connack
        except BaseException:
            if device.transport is not None:
                device.transport.abort()
            raise
    return device, tcp
