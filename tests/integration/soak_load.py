"""The load of the soak test (test_soak.py): many raw MQTT clients on one event loop.

- `Publisher`s connect (3.1.1 or 5.0, clean session), subscribe to a live topic, publish QoS 0/1/2
  at random while they stay, and leave (DISCONNECT or a dropped socket), again and again. Every
  message the broker acknowledged (PUBACK; for QoS 2, PUBREC: docs/architecture.md#acknowledged-means-kept) goes into the `Ledger`.
- `DurableSubscriber`s hold a persistent session (3.1.1, clean session 0) on `soak/d/#` at QoS 2,
  come and go at random, and count what they receive as a careful client does: a QoS 2 message
  once per packet id until its PUBREL, whatever the broker sends again (MQTT 4.3.3, method B).

Any failure of a connection (the bridge killed, a refused connect) ends that connection only: the
client waits and connects again. Payloads are unique: `<client>:<connection>:<n>:q<qos>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bridge.brokers.embedded.codec import (
    MQTT_3_1_1,
    MQTT_5,
    Connack,
    Disconnect,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
)
from support.raw import RawClient

DURABLE_FILTER = "soak/d/#"
ACK_TIMEOUT = 60.0  # a PUBACK comes from Redis or the spool: long only when the bridge is gone
FAILURES = (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError)


@dataclass
class Ledger:
    """What the publishers sent and what the broker acknowledged."""

    sent: Counter[int] = field(default_factory=Counter)  # by QoS
    acked: dict[bytes, tuple[str, int]] = field(default_factory=dict)  # payload -> (topic, qos)
    connects: int = 0
    refused: int = 0  # connections that failed (the bridge down, or dropped)


class Session:
    """One connection: a reader task hands acks to whoever waits for them and answers PUBLISHes."""

    def __init__(self, client: RawClient, on_publish: Any) -> None:
        self.client = client
        self._waiting: dict[tuple[type, int], asyncio.Future[Any]] = {}
        self._on_publish = on_publish
        self._reader = asyncio.create_task(self._read())
        self._next_id = 0

    def packet_id(self) -> int:
        self._next_id = self._next_id % 65535 + 1
        return self._next_id

    async def _read(self) -> None:
        try:
            while (packet := await self.client.recv(timeout=3600)) is not None:
                if isinstance(packet, Publish | Pubrel):
                    await self._on_publish(self, packet)
                else:
                    future = self._waiting.pop((type(packet), getattr(packet, "packet_id", 0)), None)
                    if future is not None and not future.done():
                        future.set_result(packet)
        except FAILURES:
            pass
        finally:
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError("connection lost"))

    async def expect(self, kind: type, packet_id: int) -> Any:
        if self._reader.done():
            raise ConnectionError("connection lost")
        future = self._waiting[(kind, packet_id)] = asyncio.get_running_loop().create_future()
        return await asyncio.wait_for(future, ACK_TIMEOUT)

    async def close(self, graceful: bool) -> None:
        with contextlib.suppress(*FAILURES):
            if graceful:
                await self.client.send(Disconnect())
        self.client.abort()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


async def connect(port: int, clientid: str, *, clean: bool, level: int, on_publish: Any) -> Session:
    client, connack = await asyncio.wait_for(
        RawClient.connect(port, clientid, clean_session=clean, level=level, keepalive=120), 30
    )
    if not isinstance(connack, Connack) or connack.reason_code != 0:
        client.abort()
        raise ConnectionError(f"CONNACK {connack!r}")
    return Session(client, on_publish)


async def _ack_live(session: Session, packet: Any) -> None:
    """A live subscriber that acknowledges what it gets (nothing counted)."""
    if isinstance(packet, Pubrel):
        await session.client.send(Pubcomp(packet.packet_id))
    elif packet.qos == 1:
        await session.client.send(Puback(packet.packet_id))
    elif packet.qos == 2:
        await session.client.send(Pubrec(packet.packet_id))


class Publisher:
    def __init__(self, index: int, port: int, ledger: Ledger, stop: asyncio.Event) -> None:
        self.index, self.port, self.ledger, self.stop = index, port, ledger, stop
        self.connections = 0

    async def run(self) -> None:
        await asyncio.sleep(random.uniform(0, 10))  # a ramp: not 2,000 connects at once
        while not self.stop.is_set():
            try:
                await self._one_connection()
            except FAILURES:
                self.ledger.refused += 1
            await asyncio.sleep(random.uniform(1, 5))

    async def _one_connection(self) -> None:
        level = random.choice((MQTT_3_1_1, MQTT_5))
        session = await connect(self.port, f"soak-{self.index}", clean=True, level=level, on_publish=_ack_live)
        self.ledger.connects += 1
        self.connections += 1
        graceful = random.random() < 0.7
        try:
            pid = session.packet_id()
            await session.client.send(
                Subscribe(pid, [Subscription(f"soak/live/{self.index % 50}", random.randint(0, 2))])
            )
            await session.expect(Suback, pid)
            leave = asyncio.get_running_loop().time() + random.uniform(5, 30)
            n = 0
            while not self.stop.is_set() and asyncio.get_running_loop().time() < leave:
                await self._publish(session, n)
                n += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), random.uniform(3, 20))
        finally:
            await session.close(graceful)

    async def _publish(self, session: Session, n: int) -> None:
        qos = random.randint(0, 2)
        topic = f"soak/d/{random.randrange(100)}" if random.random() < 0.7 else f"soak/live/{random.randrange(50)}"
        payload = f"{self.index}:{self.connections}:{n}:q{qos}".encode()
        self.ledger.sent[qos] += 1
        if qos == 0:
            await session.client.send(Publish(topic, payload, qos=0))
            return
        pid = session.packet_id()
        await session.client.send(Publish(topic, payload, qos=qos, packet_id=pid))
        if qos == 1:
            await session.expect(Puback, pid)
            self.ledger.acked[payload] = (topic, qos)
            return
        await session.expect(Pubrec, pid)
        self.ledger.acked[payload] = (topic, qos)  # PUBREC: the broker has it (acknowledged means kept)
        await session.client.send(Pubrel(pid))
        await session.expect(Pubcomp, pid)


class DurableSubscriber:
    """A persistent session on `soak/d/#` at QoS 2 that comes and goes, counting what it gets."""

    def __init__(self, name: str, port: int) -> None:
        self.name, self.port = name, port
        self.qos1: Counter[bytes] = Counter()
        self.qos2: Counter[bytes] = Counter()
        # QoS 2 packet ids received and not yet released, with the payload first received under
        # each: kept across connections
        self.unreleased: dict[int, bytes] = {}
        # What it got, in order, for the report of a failure: (connection, packet id, qos, dup, payload)
        self.history: list[tuple[int, int, int, bool, bytes]] = []
        # QoS 2 PUBLISHes of another message under a packet id still unreleased: the broker reused
        # an id before its exchange ended (MQTT 4.3.3), so the message was not counted
        self.reused: list[tuple[int, bytes, bytes]] = []  # (packet id, payload held, payload sent)
        self.connections = 0
        self.attempts: list[tuple[str, str]] = []  # (UTC time, what): its connects and leaves, for a report
        self.session: Session | None = None
        self.got_any = asyncio.Event()

    async def subscribe(self) -> None:
        self.connections += 1  # before: what is resent at CONNACK comes before connect() returns
        session = await connect(self.port, self.name, clean=False, level=MQTT_3_1_1, on_publish=self._received)
        await session.client.send(Subscribe(1, [Subscription(DURABLE_FILTER, 2)]))
        await session.expect(Suback, 1)
        self.session = session

    async def _received(self, session: Session, packet: Any) -> None:
        if isinstance(packet, Pubrel):
            self.history.append((self.connections, packet.packet_id, -1, False, b"PUBREL"))
            self.unreleased.pop(packet.packet_id, None)
            await session.client.send(Pubcomp(packet.packet_id))
            return
        self.history.append((self.connections, packet.packet_id, packet.qos, packet.dup, packet.payload))
        if packet.qos == 1:
            self.qos1[packet.payload] += 1
            await session.client.send(Puback(packet.packet_id))
        elif packet.qos == 2:
            held = self.unreleased.get(packet.packet_id)
            if held is None:  # a new message, not one sent again before its PUBREL
                self.unreleased[packet.packet_id] = packet.payload
                self.qos2[packet.payload] += 1
            elif held != packet.payload:
                self.reused.append((packet.packet_id, held, packet.payload))
            await session.client.send(Pubrec(packet.packet_id))

    async def come_and_go(self, stop: asyncio.Event) -> None:
        """Online a few seconds, offline a few (its session queues meanwhile), until `stop`."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), random.uniform(2, 8))
            await self.leave(graceful=random.random() < 0.5)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), random.uniform(1, 5))
            await self.come_back()

    async def come_back(self) -> None:
        while True:
            try:
                self.connections += 1  # an attempt: what is resent at CONNACK comes before connect() returns
                self.attempts.append((_now(), f"connect {self.connections}"))
                self.session = await connect(
                    self.port, self.name, clean=False, level=MQTT_3_1_1, on_publish=self._received
                )
                self.attempts.append((_now(), f"connected {self.connections}"))
                return
            except FAILURES:
                self.attempts.append((_now(), f"failed {self.connections}"))
                await asyncio.sleep(1)

    async def leave(self, graceful: bool) -> None:
        self.attempts.append((_now(), "leave" + (" (DISCONNECT)" if graceful else "")))
        if self.session is not None:
            await self.session.close(graceful)
            self.session = None

    def received(self) -> set[bytes]:
        return set(self.qos1) | set(self.qos2)

    def story(self, lost: set[bytes]) -> str:
        """For a failure's report: packet ids reused before their exchange ended, and what came
        under the packet ids of the lost messages' neighbours (the packets around each)."""
        lines = [f"{self.name}: {len(self.history)} packets over {self.connections} connection attempts"]
        lines += [
            f"  packet id {pid} reused while unreleased: held {held!r}, sent {sent!r}"
            for pid, held, sent in self.reused
        ]
        for payload in sorted(lost)[:3]:
            publisher = payload.split(b":")[0] + b":"
            near = [n for n, entry in enumerate(self.history) if entry[4].startswith(publisher)]
            lines.append(f"  lost {payload!r}; this publisher's packets it got: {[self.history[n] for n in near][-6:]}")
        lines.append(f"  its connections: {self.attempts}")
        return "\n".join(lines)


def _now() -> str:
    """The wall clock (UTC) to the millisecond, as the bridge's log and the report print it."""
    now = time.time()
    return time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}"
