"""`$SYS/broker/...` beside a real Mosquitto 2.0.11 (docs/operations.md#broker-status-sysbroker):
the same paho clients send the same traffic to both, then a fresh subscriber reads the retained
`$SYS` tree from each. The topic names are the same (hookbridge's own are under
`$SYS/broker/hookbridge/`), and so are the numbers that do not depend on when they were read:
clients, subscriptions, retained and stored messages, packets, messages and bytes each way.

Every client speaks MQTT 3.1.1, whose packets both brokers encode byte for byte alike (a 5.0
CONNACK carries each broker's own properties), so even the byte counts must match.

Reading Mosquitto's tree: it publishes every `sys_interval` (1 s here, so every 2 s: it waits for
more than the interval), and a subscriber gets the values of its last round. That round must come
after the traffic and before the reader connects; the uptime and client count it shows say
whether it did, and if the machine was too slow for that the scenario runs again on a fresh
Mosquitto (the values are checked only on a round that qualifies)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bridge.brokers.embedded.source import EmbeddedBroker
from support.bridges import BridgeFactory, mqtt_port
from support.mosquitto import own_mosquitto
from support.mqtt import V311, Client

SYS = "$SYS/broker/"
OWN = SYS + "hookbridge/"
M, K, N = 6, 3, 4  # messages to t/ (the live and the offline subscriber), retained on r/, to the shared group
SESSIONS = 4  # off1 (offline, persistent), sub1, shr1, w1: the reader comes after the round

# What Mosquitto 2.0.11 publishes (src/sys_tree.c), each checked against the real one below.
MOSQUITTO_TOPICS = {
    *(
        f"{SYS}{name}"
        for name in (
            "version",
            "uptime",
            "clients/total",
            "clients/maximum",
            "clients/inactive",
            "clients/disconnected",
            "clients/active",
            "clients/connected",
            "clients/expired",
            "heap/current",
            "heap/maximum",
            "messages/stored",
            "store/messages/count",
            "store/messages/bytes",
            "subscriptions/count",
            "shared_subscriptions/count",
            "retained messages/count",
            "messages/received",
            "messages/sent",
            "publish/messages/dropped",
            "publish/messages/received",
            "publish/messages/sent",
            "bytes/received",
            "bytes/sent",
            "publish/bytes/received",
            "publish/bytes/sent",
        )
    ),
    *(
        f"{SYS}load/{name}/{window}"
        for name in (
            "messages/received",
            "messages/sent",
            "publish/dropped",
            "publish/received",
            "publish/sent",
            "bytes/received",
            "bytes/sent",
            "sockets",
            "connections",
        )
        for window in ("1min", "5min", "15min")
    ),
}
# Equal on both brokers after the same traffic (the retained and stored counts once hookbridge's
# own topics are taken out of them)
SAME = (
    "clients/total",
    "clients/maximum",
    "clients/inactive",
    "clients/disconnected",
    "clients/active",
    "clients/connected",
    "clients/expired",
    "messages/stored",
    "store/messages/count",
    "subscriptions/count",
    "shared_subscriptions/count",
    "retained messages/count",
    "messages/received",
    "messages/sent",
    "publish/messages/dropped",
    "publish/messages/received",
    "publish/messages/sent",
    "bytes/received",
    "bytes/sent",
    "publish/bytes/received",
    "publish/bytes/sent",
)
PAYLOADS = [b"m" * (10 * i + 1) for i in range(M)]
RETAINED = b"kept"
SHARED = b"s" * 7
# The payload bytes the broker's store holds after the traffic: the m messages and t/ret queued
# for off1 (t/ret is its topic's retained message too: stored once), the k retained on r/.
USER_STORED_BYTES = sum(map(len, PAYLOADS)) + len(RETAINED) * (K + 1)


async def traffic(port: int, made: list[Client], session_ended: Callable[[], Awaitable[None]]) -> None:
    """The scenario, on one broker: an offline persistent subscriber (QoS 1, queued), a live one
    (QoS 0), a shared-group one (QoS 0), and a writer publishing at QoS 1, retained messages among them."""

    async def connect(clientid: str, clean: bool = True) -> Client:
        client = Client(port, clientid, version=V311, clean=clean)
        made.append(client)
        assert (await client.connect()).reason == 0
        return client

    offline = await connect("off1", clean=False)
    assert await offline.subscribe("t/#", 1) == [1]
    await offline.disconnect()
    await session_ended()
    live = await connect("sub1")
    assert await live.subscribe("t/#", 0) == [0]
    shared = await connect("shr1")
    assert await shared.subscribe("$share/g/s/#", 0) == [0]
    writer = await connect("w1")
    for i, payload in enumerate(PAYLOADS):
        assert await writer.publish(f"t/{i}", payload, 1) == 0
    for i in range(K):
        assert await writer.publish(f"r/{i}", RETAINED, 1, retain=True) == 0
    assert await writer.publish("t/ret", RETAINED, 1, retain=True) == 0
    for i in range(N):
        assert await writer.publish(f"s/{i}", SHARED, 1) == 0
    assert [m.topic for m in await live.expect(M + 1)] == [*(f"t/{i}" for i in range(M)), "t/ret"]
    assert len(await shared.expect(N)) == N


async def read_tree(port: int, made: list[Client], count: int, topics: list[str] | None = None) -> dict[str, str]:
    """What a fresh subscriber to `$SYS/#` gets: the retained value of each topic. With `topics`:
    those only, one subscription each (never more than one message queued for the reader)."""
    reader = Client(port, "sysreader", version=V311)
    made.append(reader)
    assert (await reader.connect()).reason == 0
    if topics is not None:
        values = {}
        for topic in topics:
            assert await reader.subscribe(topic, 0) == [0]
            got = await reader.message()
            assert (got.topic, got.retain) == (topic, True)
            values[topic] = got.payload.decode()
        return values
    assert await reader.subscribe("$SYS/#", 0) == [0]
    messages = [m for m in await reader.expect(count) if m.retain]
    assert len(messages) == count, "a round came before every retained message did"
    return {m.topic: m.payload.decode() for m in messages}


async def close(made: list[Client]) -> None:
    for client in made:
        await client.close()
    made.clear()


Scenario = Callable[[int, list[Client], Callable[[], Awaitable[None]]], Awaitable[None]]


async def mosquitto_tree(
    tmp_path: Path, scenario: Scenario, sessions: int, settings: str = "", topics: list[str] | None = None
) -> dict[str, str]:
    """Mosquitto's tree after `scenario` (which leaves `sessions` sessions), from a round that
    came after the traffic and before the reader; on a machine too slow for that, again on a
    fresh Mosquitto (3 tries)."""
    for attempt in (1, 2, 3):
        folder = tmp_path / f"mosquitto-{attempt}"
        folder.mkdir()
        made: list[Client] = []
        started = time.monotonic()
        with own_mosquitto(folder, f"sys_interval 1\n{settings}") as port:
            try:
                await scenario(port, made, lambda: asyncio.sleep(0))
                ended = time.monotonic()
                await asyncio.sleep(4.5 * attempt)  # two rounds at least, on an unloaded machine
                tree = await read_tree(port, made, len(MOSQUITTO_TOPICS), topics)
            finally:
                await close(made)
        # uptime is whole seconds since Mosquitto's start (after `started`, same monotonic clock)
        after_traffic = int(tree[SYS + "uptime"].split()[0]) > ended - math.floor(started)
        before_reader = int(tree[SYS + "clients/total"]) == sessions
        if after_traffic and before_reader:
            return tree
    raise AssertionError("no Mosquitto round came between the traffic and the reader in 3 tries")


async def hookbridge_tree(
    make_bridge: BridgeFactory, scenario: Scenario, settings: str = "", topics: list[str] | None = None
) -> tuple[dict[str, str], int]:
    """hookbridge's tree after `scenario`: two rounds after the traffic, as Mosquitto had (the
    second one's stored bytes hold the first one's $SYS payloads, as Mosquitto's do); and how
    many of its topics are hookbridge's own (retained and stored: Mosquitto does not have them)."""
    bridge = await make_bridge(rules="", extra_config=f"broker.sys_interval = 1h\n{settings}")  # a round at start
    source = bridge.broker
    assert isinstance(source, EmbeddedBroker) and source.sys_topics is not None and source.core is not None
    systopics, core = source.sys_topics, source.core
    made: list[Client] = []

    async def off1_ended() -> None:
        conn = core.active.get("off1")
        if conn is not None:
            await conn.done.wait()  # its DISCONNECT read and the connection torn down

    try:
        await scenario(mqtt_port(bridge), made, off1_ended)
        await systopics.publish()
        await systopics.publish()
        own = sum(1 for topic in systopics.values() if topic.startswith(OWN))
        return await read_tree(mqtt_port(bridge), made, len(systopics.values()), topics), own
    finally:
        await close(made)


def user_stored_bytes(tree: dict[str, str]) -> int:
    """store/messages/bytes without the broker's own $SYS payloads (which differ: version, uptime,
    loads). A round's stored bytes count the $SYS payloads of the round before, which differ from
    the ones read in the digits of the uptime and the loads only: a few bytes either way."""
    return int(tree[SYS + "store/messages/bytes"]) - sum(len(value) for value in tree.values())


async def test_same_topics_and_numbers_as_mosquitto(make_bridge: BridgeFactory, tmp_path: Path) -> None:
    mosquitto = await mosquitto_tree(tmp_path, traffic, SESSIONS)
    ours, own_count = await hookbridge_tree(make_bridge, traffic)

    own = {topic for topic in ours if topic.startswith(OWN)}
    assert own and len(own) == own_count, "hookbridge's own topics are under $SYS/broker/hookbridge/"
    assert set(mosquitto) == MOSQUITTO_TOPICS
    assert set(ours) - own == MOSQUITTO_TOPICS

    def numbers(tree: dict[str, str], own_retained: int) -> dict[str, int]:
        values = {name: int(tree[SYS + name]) for name in SAME}
        for name in ("retained messages/count", "messages/stored", "store/messages/count"):
            values[name] -= own_retained  # hookbridge's own $SYS messages, retained and stored
        return values

    expected_here = {
        "clients/total": SESSIONS,
        "clients/disconnected": 1,
        "shared_subscriptions/count": 1,
        "subscriptions/count": 2,
        "publish/messages/received": M + K + 1 + N,
        "publish/messages/sent": M + 1 + N,  # off1's are queued, not sent
        "publish/messages/dropped": 0,
    }
    theirs, here = numbers(mosquitto, 0), numbers(ours, len(own))
    # Mosquitto 2.0.11 leaves retained (and QoS 2) PUBLISH packets out of publish/messages/received:
    # it tests the packet's first byte with the mask 0xF5 (lib/packet_mosq.c), which keeps the
    # retain and QoS 2 bits. hookbridge counts every PUBLISH, as mosquitto(8) describes the topic.
    retained_publishes = K + 1
    assert theirs["publish/messages/received"] == here["publish/messages/received"] - retained_publishes
    theirs["publish/messages/received"] += retained_publishes
    assert theirs == here
    assert {name: here[name] for name in expected_here} == expected_here
    # each message once: m + 1 queued for off1 (t/ret is retained too), k retained on r/, and
    # every $SYS topic Mosquitto has, retained
    assert here["store/messages/count"] == M + 1 + K + len(MOSQUITTO_TOPICS)
    assert here["retained messages/count"] == K + 1 + len(MOSQUITTO_TOPICS)

    for tree in (mosquitto, ours):
        assert abs(user_stored_bytes(tree) - USER_STORED_BYTES) <= 30, (user_stored_bytes(tree), USER_STORED_BYTES)
    assert int(ours[SYS + "publish/bytes/received"]) == sum(map(len, PAYLOADS)) + len(RETAINED) * (K + 1) + N * len(
        SHARED
    )


D, LIMIT = 5, 3  # messages for an offline session whose queue holds LIMIT


async def drops(port: int, made: list[Client], session_ended: Callable[[], Awaitable[None]]) -> None:
    """An offline persistent session with room for LIMIT messages, and D published for it."""
    offline = Client(port, "off1", version=V311, clean=False)
    made.append(offline)
    assert (await offline.connect()).reason == 0
    assert await offline.subscribe("d/#", 1) == [1]
    await offline.disconnect()
    await session_ended()
    writer = Client(port, "w1", version=V311)
    made.append(writer)
    assert (await writer.connect()).reason == 0
    for i in range(D):
        assert await writer.publish(f"d/{i}", b"8 bytes.", 1) == 0


async def test_messages_dropped_from_a_full_queue_as_mosquitto(make_bridge: BridgeFactory, tmp_path: Path) -> None:
    """Mosquitto's max_queued_messages is hookbridge's broker.max_offline_messages: the same
    messages dropped and stored. (Which ones differ: Mosquitto refuses the newest, hookbridge
    drops the oldest, docs/brokers.md#limits; with equal payloads the numbers are the same.)"""
    # One topic per subscription: the reader's queue is bounded too (at LIMIT messages, on both)
    topics = [SYS + name for name in ("uptime", "clients/total", "publish/messages/dropped", "store/messages/count")]
    topics.append(SYS + "load/publish/dropped/1min")
    mosquitto = await mosquitto_tree(tmp_path, drops, 2, f"max_queued_messages {LIMIT}\n", topics)
    ours, own = await hookbridge_tree(make_bridge, drops, f"broker.max_offline_messages = {LIMIT}\n", topics)
    for tree, own_retained in ((mosquitto, 0), (ours, own)):
        assert int(tree[SYS + "publish/messages/dropped"]) == D - LIMIT
        # LIMIT queued messages, every $SYS topic
        assert int(tree[SYS + "store/messages/count"]) - own_retained == LIMIT + len(MOSQUITTO_TOPICS)
        assert float(tree[SYS + "load/publish/dropped/1min"]) > 0
