"""Durable sessions through a storm of `kill -9`s (docs/brokers.md#across-a-kill--9-durable-sessions):
the bridge killed and started again every few seconds while publishers send QoS 1 and 2 and four
durable subscribers come and go. At the end every message the broker acknowledged reached every
subscriber, and a QoS 2 one once (counted as a careful client does: once per packet id until its
PUBREL, MQTT 4.3.3 method B), and the broker never sent another message under a packet id the
subscriber still held.

Where test_soak.py kills the bridge once under a large load with the rules writing to Redis, this
kills it often under a small one, so the kills land in every part of a delivery: between a
message's commit and its PUBLISH, between a PUBREC and the commit of its PUBREL. With
aftercommit.py's rule taken out it fails (QoS 2 messages delivered twice, and lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from pathlib import Path

from bridge.brokers.embedded.codec import Puback, Pubcomp, Publish, Pubrec, Pubrel
from support.mqtt import wait_until
from support.process import BridgeProcess
from support.raw import RawClient

SUBSCRIBERS = 4
PUBLISHERS = 10
SECONDS = 24  # of load, with a kill every SECONDS / KILLS on average
KILLS = 6
FAILURES = (OSError, TimeoutError, ConnectionError, asyncio.IncompleteReadError)


class Subscriber:
    """A durable session on storm/# at QoS 2 (3.1.1, clean session 0), counting what it gets."""

    def __init__(self, name: str, port: int) -> None:
        self.name, self.port = name, port
        self.got: dict[bytes, int] = {}  # payload -> times counted
        self.unreleased: dict[int, bytes] = {}  # QoS 2 packet id -> the payload first received under it
        self.reused: list[tuple[int, bytes, bytes]] = []  # (id, held, sent): another message under a held id

    async def subscribe(self) -> None:
        client, _ = await RawClient.connect(self.port, self.name, clean_session=False)
        assert (await client.subscribe(1, ("storm/#", 2))).reason_codes == [2]
        client.abort()

    async def online(self, seconds: float) -> None:
        """One connection, read for `seconds`, then dropped (what was unanswered comes again)."""
        client, _ = await asyncio.wait_for(RawClient.connect(self.port, self.name, clean_session=False), 10)
        try:
            # cancelled only at the end: a read cut short loses bytes of this connection alone
            await asyncio.wait_for(self._read(client), seconds)
        except TimeoutError:
            pass
        finally:
            client.abort()

    async def _read(self, client: RawClient) -> None:
        while (packet := await client.recv(timeout=3600)) is not None:
            if isinstance(packet, Pubrel):
                self.unreleased.pop(packet.packet_id, None)
                await client.send(Pubcomp(packet.packet_id))
            elif isinstance(packet, Publish) and packet.qos == 1:
                self.got[packet.payload] = self.got.get(packet.payload, 0) + 1
                await client.send(Puback(packet.packet_id))
            elif isinstance(packet, Publish):
                held = self.unreleased.get(packet.packet_id)
                if held is None:
                    self.unreleased[packet.packet_id] = packet.payload
                    self.got[packet.payload] = self.got.get(packet.payload, 0) + 1
                elif held != packet.payload:
                    self.reused.append((packet.packet_id, held, packet.payload))
                await client.send(Pubrec(packet.packet_id))

    async def come_and_go(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(*FAILURES):
                await self.online(random.uniform(0.3, 2))
            await asyncio.sleep(random.uniform(0, 0.5))


async def publish(port: int, name: str, acked: set[bytes], stop: asyncio.Event) -> None:
    """Connections of a few messages each, QoS 1 and 2, until `stop`; what got its PUBACK or
    PUBREC goes into `acked`."""
    connection = 0
    while not stop.is_set():
        connection += 1
        try:
            client, _ = await asyncio.wait_for(RawClient.connect(port, name), 10)
        except FAILURES:
            await asyncio.sleep(0.05)
            continue
        try:
            for n in range(random.randint(1, 30)):
                qos = 1 + n % 2
                payload = f"{name}:{connection}:{n}:q{qos}".encode()
                await client.send(Publish(f"storm/{n % 7}", payload, qos=qos, packet_id=n + 1))
                if await client.recv(timeout=10) is None:
                    break
                acked.add(payload)
                if qos == 2:
                    await client.send(Pubrel(n + 1))
                    await client.recv(timeout=10)
        except FAILURES:
            pass
        finally:
            client.abort()


async def test_every_acknowledged_message_reaches_each_durable_subscriber_through_kill_9s(
    tmp_path: Path, bridges: list[BridgeProcess]
) -> None:
    extra = f"broker.durable_sessions = on\nbroker.durable_dir = {tmp_path / 'store'}\nbroker.max_inflight = 10\n"
    bridge = BridgeProcess(tmp_path, "", "", extra)
    bridges.append(bridge)
    await asyncio.to_thread(bridge.start)
    await asyncio.to_thread(bridge.wait_for, bridge.ready, "the bridge to be ready")
    subscribers = [Subscriber(f"storm-sub-{n}", bridge.mqtt_port) for n in range(SUBSCRIBERS)]
    for subscriber in subscribers:
        await subscriber.subscribe()

    acked: set[bytes] = set()
    stop = asyncio.Event()
    tasks = [asyncio.create_task(s.come_and_go(stop)) for s in subscribers]
    tasks += [asyncio.create_task(publish(bridge.mqtt_port, f"pub-{n}", acked, stop)) for n in range(PUBLISHERS)]
    kills = 0
    started = time.monotonic()
    while kills < KILLS:
        await asyncio.sleep(SECONDS / KILLS * random.uniform(0.5, 1.5))
        await asyncio.to_thread(bridge.kill)
        await asyncio.to_thread(bridge.start)
        kills += 1
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    seconds = time.monotonic() - started

    def all_delivered() -> bool:
        return all(acked <= set(s.got) for s in subscribers)

    finals = [asyncio.create_task(s.online(120)) for s in subscribers]
    with contextlib.suppress(AssertionError):  # what is missing is reported below
        await wait_until(all_delivered, 120, "every subscriber to have every acknowledged message")
    for final in finals:
        final.cancel()
    await asyncio.gather(*finals, return_exceptions=True)

    assert len(acked) > 200, f"only {len(acked)} messages acknowledged in {seconds:.0f} s with {kills} kills"
    for subscriber in subscribers:
        lost = acked - set(subscriber.got)
        assert not lost, (
            f"{subscriber.name}: {len(lost)} of {len(acked)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"
        )
        twice = sorted(p for p, n in subscriber.got.items() if n > 1 and p.endswith(b"q2"))
        assert not twice, f"{subscriber.name}: {len(twice)} QoS 2 messages delivered twice, e.g. {twice[:5]}"
        assert not subscriber.reused, f"{subscriber.name}: packet ids reused while held: {subscriber.reused[:5]}"
