"""The embedded broker in a fleet's shape, at a size CI affords (docs/brokers.md#a-fleet-in-one-process).

2,000 devices, each a raw MQTT 3.1.1 connection subscribed to its own `dev/<id>/cmd/#` and to a
broadcast topic, plus a shared group and a wildcard watcher: every device gets its own commands
and only those, the broadcast reaches every device once, and a wildcard SUBSCRIBE among 2,000
retained messages gets exactly the ones it matches. The subscriptions live in a topic tree
(bridge/brokers/embedded/topictree.py); this checks the tree's answers through the whole broker.
"""

from __future__ import annotations

import asyncio
import resource

import pytest

from bridge.app import Bridge
from bridge.brokers.embedded.codec import Puback, Publish, Suback, encode
from support.bridges import BridgeFactory, mqtt_port
from support.raw import RawClient

DEVICES = 2_000
BROADCAST = "fleet/all"


@pytest.fixture
async def bridge(make_bridge: BridgeFactory) -> Bridge:
    # Each device is a socket on both sides of this process.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 3 * DEVICES:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 3 * DEVICES + 1000), hard))
    return await make_bridge(rules="", extra_config=f"broker.max_connections = {DEVICES + 100}\n")


async def _connected(port: int, client_id: str) -> RawClient:
    client, connack = await RawClient.connect(port, client_id, keepalive=0)
    assert connack is not None and connack.reason_code == 0, client_id
    return client


async def _fleet(port: int) -> list[RawClient]:
    gate = asyncio.Semaphore(50)  # within the listen backlog

    async def device(number: int) -> RawClient:
        async with gate:
            client = await _connected(port, f"dev-{number}")
            suback = await client.subscribe(1, (f"dev/{number}/cmd/#", 1), (BROADCAST, 0))
            assert isinstance(suback, Suback) and list(suback.reason_codes) == [1, 0]
            return client

    return list(await asyncio.gather(*(device(n) for n in range(DEVICES))))


async def _publish_all(port: int, messages: list[Publish]) -> None:
    """QoS 1 publishes, one PUBACK each: once all are acknowledged every one has been routed."""
    publisher = await _connected(port, "fleet-publisher")
    await publisher.send_bytes(b"".join(encode(message, publisher.level) for message in messages))
    acked = 0
    while acked < sum(1 for m in messages if m.qos):
        packet = await publisher.recv(timeout=60)
        assert isinstance(packet, Puback), packet
        acked += 1
    publisher.abort()


async def _take(client: RawClient, count: int) -> list[tuple[str, bytes]]:
    got = []
    for _ in range(count):
        packet = await client.recv(timeout=60)
        assert isinstance(packet, Publish), packet
        got.append((packet.topic, packet.payload))
    return got


async def test_each_device_gets_its_own_commands_and_the_broadcast_once(bridge: Bridge) -> None:
    port = mqtt_port(bridge)
    fleet = await _fleet(port)
    watcher = await _connected(port, "watcher")
    assert list((await watcher.subscribe(1, ("dev/+/cmd/reboot", 1))).reason_codes) == [1]
    commands = [
        Publish(f"dev/{n}/cmd/{'reboot' if n % 100 == 0 else 'set'}", str(n).encode(), qos=1, packet_id=n + 1)
        for n in range(DEVICES)
    ]
    await _publish_all(port, [*commands, Publish(BROADCAST, b"hello", qos=1, packet_id=DEVICES + 1)])
    # Deliveries to one client keep publish order: its command, then the broadcast, then nothing.
    for number, device in enumerate(fleet):
        kind = "reboot" if number % 100 == 0 else "set"
        assert await _take(device, 2) == [(f"dev/{number}/cmd/{kind}", str(number).encode()), (BROADCAST, b"hello")]
    watched = await _take(watcher, DEVICES // 100)
    assert watched == [(f"dev/{n}/cmd/reboot", str(n).encode()) for n in range(0, DEVICES, 100)]
    # Nothing more for anyone: a marker to a few devices comes next, nothing before it.
    await _publish_all(port, [Publish(f"dev/{n}/cmd/end", b"end", qos=1, packet_id=n + 1) for n in (0, 999, 1999)])
    for number in (0, 999, 1999):
        assert await _take(fleet[number], 1) == [(f"dev/{number}/cmd/end", b"end")]
    for client in [*fleet, watcher]:
        client.abort()


async def test_a_wildcard_subscribe_gets_exactly_the_retained_messages_it_matches(bridge: Bridge) -> None:
    port = mqtt_port(bridge)
    retained = [
        Publish(f"r/{k}/{leaf}", f"{k}{leaf}".encode(), qos=0, retain=True) for k in range(1000) for leaf in "ab"
    ]
    retained.append(Publish("r/7", b"parent", qos=0, retain=True))  # `r/7/#` matches `r/7` too
    retained.append(Publish("$fleet/r/7", b"dollar", qos=0, retain=True))  # never by a leading wildcard
    await _publish_all(port, [*retained, Publish("r/done", b"", qos=1, packet_id=1)])
    # filter: (the retained messages it gets, a live topic it matches for the marker)
    cases = {
        "r/7/#": ({("r/7", b"parent"), ("r/7/a", b"7a"), ("r/7/b", b"7b")}, "r/7/a"),
        "r/+/a": ({(f"r/{k}/a", f"{k}a".encode()) for k in range(1000)}, "r/7/a"),
        "r/42/b": ({("r/42/b", b"42b")}, "r/42/b"),
        "+/+/+": ({(f"r/{k}/{leaf}", f"{k}{leaf}".encode()) for k in range(1000) for leaf in "ab"}, "r/7/a"),
        "nothing/#": (set(), "nothing/x"),
    }
    for number, (topic_filter, (expected, marker_topic)) in enumerate(cases.items()):
        client = await _connected(port, f"looker-{number}")
        suback = await client.subscribe(1, (topic_filter, 0))
        assert isinstance(suback, Suback)
        got = await _take(client, len(expected))
        assert set(got) == expected and len(got) == len(expected), topic_filter
        # and nothing else: a live message to a topic it matches is the next thing it reads
        await _publish_all(port, [Publish(marker_topic, b"live", qos=1, packet_id=1)])
        assert await _take(client, 1) == [(marker_topic, b"live")], topic_filter
        client.abort()
