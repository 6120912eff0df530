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

from broker_suite.clients import V311, Client

from bridge.brokers.embedded.source import EmbeddedBroker
from support.bridges import BridgeFactory, mqtt_port
from support.mosquitto import own_mosquitto

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
    assert [m.topic for m in await live.messages_n(M + 1)] == [*(f"t/{i}" for i in range(M)), "t/ret"]
    assert len(await shared.messages_n(N)) == N


async def read_tree(port: int, made: list[Client], count: int) -> dict[str, str]:
    """What a fresh subscriber to `$SYS/#` gets: the retained value of each topic."""
    reader = Client(port, "sysreader", version=V311)
    made.append(reader)
    assert (await reader.connect()).reason == 0
    assert await reader.subscribe("$SYS/#", 0) == [0]
    got = [m for m in await reader.messages_n(count) if m.retain]
    assert len(got) == count, "a round came before every retained message did"
    return {m.topic: m.payload.decode() for m in got}


async def close(made: list[Client]) -> None:
    for client in made:
        await client.close()
    made.clear()


async def mosquitto_tree(tmp_path: Path, attempt: int) -> dict[str, str] | None:
    """Mosquitto's tree after the traffic, or None when its last round before the reader did not
    come between the traffic and the reader (a slow machine: the caller tries again)."""
    folder = tmp_path / f"mosquitto-{attempt}"
    folder.mkdir()
    made: list[Client] = []
    started = time.monotonic()
    with own_mosquitto(folder, "sys_interval 1\n") as port:
        try:
            await traffic(port, made, lambda: asyncio.sleep(0))
            ended = time.monotonic()
            await asyncio.sleep(4.5 * attempt)  # two rounds at least, on an unloaded machine
            tree = await read_tree(port, made, len(MOSQUITTO_TOPICS))
        finally:
            await close(made)
    # uptime is whole seconds since Mosquitto's start (after `started`, same monotonic clock)
    uptime = int(tree[SYS + "uptime"].split()[0])
    after_traffic = uptime > ended - math.floor(started)
    before_reader = int(tree[SYS + "clients/total"]) == SESSIONS
    return tree if after_traffic and before_reader else None


async def test_same_topics_and_numbers_as_mosquitto(make_bridge: BridgeFactory, tmp_path: Path) -> None:
    mosquitto = None
    for attempt in (1, 2, 3):
        mosquitto = await mosquitto_tree(tmp_path, attempt)
        if mosquitto is not None:
            break
    assert mosquitto is not None, "no Mosquitto round came between the traffic and the reader in 3 tries"

    bridge = await make_bridge(rules="", extra_config="broker.sys_interval = 1h\n")  # a round at start only
    source = bridge.broker
    assert isinstance(source, EmbeddedBroker) and source.sys_topics is not None and source.core is not None
    systopics, core = source.sys_topics, source.core
    made: list[Client] = []
    try:

        async def off1_ended() -> None:
            conn = core.active.get("off1")
            if conn is not None:
                await conn.done.wait()  # its DISCONNECT read and the connection torn down

        await traffic(mqtt_port(bridge), made, off1_ended)
        # two rounds after the traffic, as Mosquitto had: the second one's stored bytes hold the
        # first one's $SYS payloads (which the comparison below takes out)
        await systopics.publish()
        await systopics.publish()
        ours = await read_tree(mqtt_port(bridge), made, len(systopics.values()))
    finally:
        await close(made)

    own = {topic for topic in ours if topic.startswith(OWN)}
    assert own, "hookbridge's own topics are under $SYS/broker/hookbridge/"
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

    # Stored bytes include each broker's own $SYS payloads, which differ (version, uptime,
    # loads): without them, what is left is the clients' messages. A round's stored bytes count
    # the $SYS payloads of the round before, which differ from the ones read in the digits of
    # the uptime and the loads only (a few bytes).
    for tree in (mosquitto, ours):
        sys_bytes = sum(len(value) for value in tree.values())
        left = int(tree[SYS + "store/messages/bytes"]) - sys_bytes
        assert abs(left - USER_STORED_BYTES) <= 30, (left, USER_STORED_BYTES)
    assert int(ours[SYS + "publish/bytes/received"]) == sum(map(len, PAYLOADS)) + len(RETAINED) * (K + 1) + N * len(
        SHARED
    )
