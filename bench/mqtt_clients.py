"""Raw MQTT 3.1.1 clients on asyncio streams, for what the C clients cannot do quickly: open
thousands of persistent sessions, publish to thousands of topics, and time a reconnect down to
its CONNACK and first message. The bridge's own codec frames and parses the packets.

Every wait has a timeout: a broker that stops answering fails the run instead of hanging it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from bench.broker_servers import HOST
from bridge.brokers.embedded.codec import (
    MQTT_3_1_1,
    Connack,
    Connect,
    Decoder,
    Disconnect,
    Packet,
    Puback,
    Publish,
    Suback,
    Subscribe,
    Subscription,
    encode,
    encode_publish,
)

TIMEOUT = 60.0  # seconds without the packet a client waits for before the run fails
RESTART_TIMEOUT = 600.0  # seconds a restarted broker has to let a session in


class Client:
    """One connection: packets out with `send`, packets in with `receive`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._decoder = Decoder(level=MQTT_3_1_1, role="client")
        self._packets: deque[Packet] = deque()

    @classmethod
    async def connect(
        cls,
        port: int,
        client_id: str,
        *,
        clean: bool = True,
        username: str | None = None,
        password: bytes | None = None,
    ) -> tuple[Client, Connack]:
        """A connected client and its CONNACK (accepted, or ConnectionError)."""
        reader, writer = await asyncio.open_connection(HOST, port)
        client = cls(reader, writer)
        try:
            return client, await client.handshake(client_id, clean=clean, username=username, password=password)
        except BaseException:
            writer.close()
            raise

    async def handshake(
        self, client_id: str, *, clean: bool, username: str | None = None, password: bytes | None = None
    ) -> Connack:
        self.send(Connect(client_id=client_id, clean_start=clean, keepalive=0, username=username, password=password))
        connack = await self.receive()
        if not isinstance(connack, Connack) or connack.reason_code != 0:
            raise ConnectionError(f"{client_id}: {connack!r} instead of an accepted CONNACK")
        return connack

    def send(self, packet: Packet) -> None:
        self.writer.write(encode(packet, MQTT_3_1_1))

    async def receive(self) -> Packet:
        while not self._packets:
            await self._read()
        return self._packets.popleft()

    async def receive_all(self) -> list[Packet]:
        """Every packet that has arrived, at least one."""
        while not self._packets:
            await self._read()
        packets = list(self._packets)
        self._packets.clear()
        return packets

    async def _read(self) -> None:
        data = await asyncio.wait_for(self.reader.read(1 << 16), TIMEOUT)
        if not data:
            raise ConnectionError("the broker closed the connection")
        self._packets.extend(self._decoder.feed(data))

    async def subscribe(self, topic_filter: str) -> None:
        self.send(Subscribe(1, [Subscription(topic_filter, qos=1)]))
        suback = await self.receive()
        if not isinstance(suback, Suback) or suback.reason_codes != [1]:
            raise ConnectionError(f"SUBSCRIBE {topic_filter}: {suback!r}")

    async def close(self) -> None:
        self.send(Disconnect())
        self.writer.close()
        await self.writer.wait_closed()


async def open_sessions(port: int, client_ids: list[str], filter_of: Callable[[int], str], window: int = 100) -> None:
    """Persistent sessions (clean session 0), the i-th subscribed at QoS 1 to filter_of(i), left
    offline. At most `window` handshakes at a time: the brokers' listen backlog is 100."""
    gate = asyncio.Semaphore(window)

    async def one(number: int) -> None:
        async with gate:
            client, _ = await Client.connect(port, client_ids[number], clean=False)
            await client.subscribe(filter_of(number))
            await client.close()

    await asyncio.gather(*(one(number) for number in range(len(client_ids))))


async def publish(
    port: int,
    count: int,
    topic_of: Callable[[int], str],
    payload: bytes | Callable[[int], bytes],
    window: int = 1000,
    client_id: str = "bench-populate",
) -> None:
    """`count` QoS 1 messages, the i-th to topic_of(i) with `payload` (or payload(i)), from one
    clean-session client keeping up to `window` unacknowledged (as mosquitto_pub -M does);
    returns once every one is acknowledged."""
    payload_of = payload if callable(payload) else (lambda _: payload)
    client, _ = await Client.connect(port, client_id)
    free = deque(range(1, window + 1))
    sent = acked = 0
    while acked < count:
        batch = []
        while free and sent < count:
            batch.append(
                encode_publish(Publish(topic_of(sent), payload_of(sent), qos=1, packet_id=free.popleft()), MQTT_3_1_1)
            )
            sent += 1
        if batch:
            client.writer.write(b"".join(batch))
            await client.writer.drain()
        for packet in await client.receive_all():
            if not isinstance(packet, Puback):
                raise ConnectionError(f"publisher: {packet!r} instead of a PUBACK")
            free.append(packet.packet_id)
            acked += 1
    await client.close()


@dataclass(frozen=True)
class Reconnect:
    """Seconds from the broker process's start to each step of one session's return."""

    accepting: float
    """the listener accepted a TCP connection"""
    connack: float
    """CONNACK with session present 1"""
    first: float
    """the first of the session's stored messages arrived"""
    last: float
    """all `expected` of them had arrived"""


async def connect_when_up(port: int, client_id: str, *, clean: bool) -> tuple[float, Client, Connack]:
    """Connect as soon as a starting broker lets a client in, retrying refused connections and
    ones dropped before their CONNACK every 2 ms: (when the listener first accepted, the client,
    its CONNACK)."""
    deadline = time.perf_counter() + RESTART_TIMEOUT
    accepting: float | None = None
    while True:
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
        except OSError:
            if time.perf_counter() > deadline:
                raise
            await asyncio.sleep(0.002)
            continue
        accepting = accepting or time.perf_counter()
        client = Client(reader, writer)
        try:
            return accepting, client, await client.handshake(client_id, clean=clean)
        except (TimeoutError, ConnectionError):  # accepted before the broker was up
            writer.close()
            if time.perf_counter() > deadline:
                raise
            await asyncio.sleep(0.002)


async def reconnect(port: int, client_id: str, started: float, expected: int) -> Reconnect:
    """Connect `client_id` (clean session 0) to a starting broker as soon as it lets it in, and
    take its `expected` stored messages (acknowledging each); `started` is the
    time.perf_counter() of the broker's process start."""
    accepting, client, connack = await connect_when_up(port, client_id, clean=False)
    connected = time.perf_counter()
    if not connack.session_present:
        raise RuntimeError(f"{client_id}: session present 0 after the restart (the session was lost)")
    first = await _take(client, expected)
    last = time.perf_counter()
    await client.close()
    return Reconnect(accepting - started, connected - started, first - started, last - started)


async def _take(client: Client, expected: int) -> float:
    """Receive and acknowledge `expected` QoS 1 messages; the time the first one arrived."""
    first = 0.0
    for number in range(expected):
        packet = await client.receive()
        if not isinstance(packet, Publish) or packet.qos != 1:
            raise RuntimeError(f"message {number + 1} of {expected}: {packet!r}")
        first = first or time.perf_counter()
        client.send(Puback(packet.packet_id))
    return first
