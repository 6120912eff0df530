"""One bound for all queued messages (`broker.max_queued_bytes`, docs/operations.md#memory-of-the-embedded-broker-what-bounds-it) on a real `hookbridge run`
with real (bare socket) clients: 200 offline persistent sessions, QoS 1, each owed distinct messages
until all of them together are past a 2 MB bound.

Three tiers of sessions: 160 owed 5 messages, 20 owed 20 and 20 owed 65. Only the last tier's
queues are ever the largest once the bound is reached, so every drop must be from them, and from
the front (their oldest): each keeps an unbroken run of its newest messages, the 20 of them within
one message of each other, and every other session keeps all it was owed. The queues together hold
exactly as many messages as fit in the bound (a drop frees one message: never more than needed),
the drops are counted (`hookbridge_broker_refused_total{reason="queued_bytes"}` and
`hookbridge_broker_dropped_messages`), and the kept messages are delivered in order when the
sessions come back. With durable sessions on, the same holds after a restart: the store's positions
moved past the dropped messages, so the restart brings none of them back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bridge.brokers.embedded.codec import Connack, Disconnect, Puback, Publish, encode
from bridge.brokers.embedded.sessions import MESSAGE_OVERHEAD
from support.process import BridgeProcess
from support.raw import RawClient, brief

RawConnect = Callable[..., Awaitable[tuple[RawClient, Any]]]

BOUND = 2 << 20  # broker.max_queued_bytes = 2MB
PAYLOAD = 1000
# tier: (sessions, messages owed each); the client ids (and so the topics) all have the same length
TIERS = {"L": (160, 5), "M": (20, 20), "H": (20, 65)}
OWED: dict[str, int] = {}  # client id -> messages published to its topic
for tier, (count, owed) in TIERS.items():
    for n in range(count):
        OWED[f"qb-{tier}-{n:03d}"] = owed
HEAVY = [clientid for clientid in OWED if clientid.startswith("qb-H-")]


def topic(clientid: str) -> str:
    return f"qb/{clientid}"


def payload(clientid: str, k: int) -> bytes:
    return f"{clientid}:{k:03d}:".encode().ljust(PAYLOAD, b".")


def size(clientid: str) -> int:
    """What one queued message counts for (as sessions.Outgoing.size counts it)."""
    return len(topic(clientid)) + PAYLOAD + MESSAGE_OVERHEAD


def schedule() -> list[tuple[str, int]]:
    """(client id, k) in publish order: 5 to every session in turn, then the medium and heavy
    ones their remaining messages, interleaved."""
    order = [(clientid, k) for k in range(5) for clientid in OWED]
    for k in range(5, 65):
        order += [(clientid, k) for clientid in OWED if k < OWED[clientid]]
    return order


async def start(bridge: BridgeProcess) -> None:
    """Start the bridge and wait until its broker listens (with durable sessions, after the store
    was read back)."""

    def broker_up() -> bool:
        answer = bridge.get("/healthz")
        return answer is not None and bool(json.loads(answer[1])["broker"]["up"])

    await asyncio.to_thread(bridge.start)
    await asyncio.to_thread(bridge.wait_for, broker_up, "the broker to listen")


async def connect(raw_connect: RawConnect, port: int, clientid: str) -> tuple[RawClient, Connack]:
    client, connack = await raw_connect(port, clientid, clean_session=False)
    assert isinstance(connack, Connack) and connack.reason_code == 0, connack
    return client, connack


async def publish(client: RawClient, messages: list[tuple[str, bytes]]) -> None:
    """QoS 1, in batches written at once (packet ids 1..n each); returns once every PUBACK is in."""
    for start in range(0, len(messages), 500):
        batch = messages[start : start + 500]
        await client.send_bytes(
            b"".join(encode(Publish(t, p, qos=1, packet_id=n + 1), client.level) for n, (t, p) in enumerate(batch))
        )
        pending = set(range(1, len(batch) + 1))
        while pending:
            packet = await client.recv(timeout=30)
            assert isinstance(packet, Puback) and packet.reason_code == 0, packet and brief(packet)
            pending.discard(packet.packet_id)


async def receive_all(client: RawClient, clientid: str) -> list[int]:
    """The k of every message the session gets, acknowledged, until its last one (k = owed - 1)."""
    last, got = OWED[clientid] - 1, []
    while not got or got[-1] != last:
        packet = await client.recv(timeout=10)
        assert isinstance(packet, Publish), f"{clientid}: {packet and brief(packet)} after {got}"
        assert packet.topic == topic(clientid)
        name, k, _ = packet.payload.decode().split(":", 2)
        assert name == clientid
        got.append(int(k))
        await client.send(Puback(packet.packet_id))
    return got


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "durable-restart"])
async def test_the_largest_queues_lose_their_oldest_when_all_sessions_are_over_the_bound(
    tmp_path: Path, bridges: list[BridgeProcess], raw_connect: RawConnect, durable: bool
) -> None:
    extra = "broker.max_queued_bytes = 2MB\n"
    if durable:
        extra += f"broker.durable_sessions = on\nbroker.durable_dir = {tmp_path / 'store'}\n"
    bridge = BridgeProcess(tmp_path, "", "", extra)
    bridges.append(bridge)
    await start(bridge)
    port = bridge.mqtt_port

    for clientid in OWED:
        client, _ = await connect(raw_connect, port, clientid)
        assert (await client.subscribe(1, (topic(clientid), 1))).reason_codes == [1]
        await client.send(Disconnect())
        assert await client.recv() is None
    if durable:
        await asyncio.to_thread(
            bridge.wait_for,
            lambda: bridge.metric("hookbridge_broker_durable_sessions") == len(OWED),
            "every session in the store",
        )
    assert bridge.metric("hookbridge_broker_refused_total", reason="queued_bytes") == 0

    publisher, _ = await raw_connect(port, "qb-publisher")
    order = schedule()
    await publish(publisher, [(topic(c), payload(c, k)) for c, k in order])

    assert len({size(clientid) for clientid in OWED}) == 1  # every message the same size
    fits = BOUND // size(HEAVY[0])
    dropped = len(order) - fits
    assert dropped > 700  # the test is about the bound, not about a near miss
    assert bridge.metric("hookbridge_broker_refused_total", reason="queued_bytes") == dropped
    assert bridge.metric("hookbridge_broker_dropped_messages") == dropped
    assert bridge.metric("hookbridge_broker_refused_total", reason="offline_bytes") == 0
    log = bridge.log.read_text()
    assert "over broker.max_queued_bytes (2097152 bytes): dropped the oldest of the largest queues" in log

    if durable:
        assert bridge.terminate() == 0, bridge.log.read_text()[-3000:]
        await start(bridge)

    kept: dict[str, list[int]] = {}
    for clientid in OWED:
        client, connack = await connect(raw_connect, port, clientid)
        assert connack.session_present
        kept[clientid] = await receive_all(client, clientid)
        await client.send(Disconnect())

    # every session got an unbroken run ending with its newest message, in order
    for clientid, got in kept.items():
        assert got == list(range(got[0], OWED[clientid])), (clientid, got)
    # only the largest queues lost messages, their oldest, and they stay within one message of each other
    lost = {clientid: got[0] for clientid, got in kept.items() if got[0]}
    assert set(lost) == set(HEAVY)
    assert sum(lost.values()) == dropped
    heavy_kept = [len(kept[clientid]) for clientid in HEAVY]
    assert max(heavy_kept) - min(heavy_kept) <= 1
    assert min(heavy_kept) > TIERS["M"][1]  # still larger than any other queue: none was dropped too soon
    # the queues together held what fits in the bound, and no less
    queued = sum(len(got) * size(clientid) for clientid, got in kept.items())
    assert BOUND - size(HEAVY[0]) < queued <= BOUND
    # no drop after the sessions came back (nor while the durable store was read back)
    assert bridge.metric("hookbridge_broker_refused_total", reason="queued_bytes") == (0 if durable else dropped)
