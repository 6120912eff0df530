"""The `broker.*` limit settings reach the embedded broker of a whole bridge, and what they refuse
or drop is counted in /metrics (docs/brokers.md#limits). Clients here are bare sockets
speaking the project's codec, in both protocol versions; the broker's own tests cover every
limit in detail, these check the path config -> Limits -> broker -> /metrics."""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge.app import Bridge
from bridge.brokers.embedded.codec import (
    MQTT_3_1_1,
    MQTT_5,
    Connack,
    Connect,
    Decoder,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Publish,
    ReasonCode,
    Suback,
    Subscribe,
    Subscription,
    encode,
)
from support.bridges import BridgeFactory, mqtt_port

TIMEOUT = 10.0


class CodecClient:
    """One connection: sends the packets it is given, returns the broker's one by one."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, level: int) -> None:
        self.reader, self.writer, self.level = reader, writer, level
        self.decoder = Decoder(level=level, role="client")
        self.pending: collections.deque[Packet] = collections.deque()

    async def send(self, packet: Packet) -> None:
        self.writer.write(encode(packet, self.level))
        await self.writer.drain()

    async def recv(self) -> Packet | None:
        """The broker's next packet; None once it closed the connection."""
        while not self.pending:
            try:
                data = await asyncio.wait_for(self.reader.read(1 << 16), TIMEOUT)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.pending.extend(self.decoder.feed(data))
        return self.pending.popleft()

    def close(self) -> None:
        self.writer.transport.abort()


def refused(bridge: Bridge) -> dict[str, int]:
    """hookbridge_broker_refused_total as /metrics shows it, {reason: count}."""
    return {
        sample.labels["reason"]: int(sample.value)
        for family in text_string_to_metric_families(bridge.metrics.render())
        for sample in family.samples
        if sample.name == "hookbridge_broker_refused_total"
    }


def dropped(bridge: Bridge) -> str:
    found = re.search(r'^hookbridge_broker_dropped_messages\{pool="embedded"\} (\S+)$', bridge.metrics.render(), re.M)
    assert found, "hookbridge_broker_dropped_messages is missing"
    return found[1]


class Dialer:
    """Opens clients, and aborts every one it opened at the end of the test."""

    def __init__(self) -> None:
        self.made: list[CodecClient] = []

    async def open(self, port: int, connect: Connect) -> tuple[CodecClient, Packet | None]:
        """A connection that sent `connect`, and the broker's answer (None: it closed)."""
        client = CodecClient(*await asyncio.open_connection("127.0.0.1", port), connect.protocol_level)
        self.made.append(client)
        await client.send(connect)
        return client, await client.recv()

    async def accepted(self, port: int, client_id: str, level: int, clean: bool = True) -> CodecClient:
        """A client whose CONNECT was accepted."""
        client, connack = await self.open(port, Connect(client_id, protocol_level=level, clean_start=clean))
        assert isinstance(connack, Connack) and connack.reason_code == 0, connack
        return client


@pytest.fixture
async def clients() -> AsyncIterator[Dialer]:
    """Ask for it before make_bridge: its clients are aborted after the bridge stopped."""
    dialer = Dialer()
    yield dialer
    for client in dialer.made:
        client.close()


async def test_max_packet_size_closes_the_sender_and_is_counted(clients: Dialer, make_bridge: BridgeFactory) -> None:
    bridge = await make_bridge(rules="", extra_config="broker.max_packet_size = 1KB\n")
    port = mqtt_port(bridge)
    assert refused(bridge)["packet_too_large"] == 0
    watcher = await clients.accepted(port, "ps-watch", MQTT_3_1_1)
    await watcher.send(Subscribe(1, [Subscription("ps/#", 1)]))
    assert await watcher.recv() == Suback(1, [1])

    v5, connack = await clients.open(port, Connect("ps-v5", protocol_level=MQTT_5))
    assert isinstance(connack, Connack) and connack.properties.maximum_packet_size == 1024
    await v5.send(Publish("ps/big", b"x" * 2000, qos=1, packet_id=1))
    disconnect = await v5.recv()
    assert isinstance(disconnect, Disconnect) and disconnect.reason_code == ReasonCode.PACKET_TOO_LARGE
    assert await v5.recv() is None

    v4 = await clients.accepted(port, "ps-v4", MQTT_3_1_1)
    await v4.send(Publish("ps/big", b"x" * 2000, qos=1, packet_id=1))
    assert await v4.recv() is None  # 3.1.1 has no DISCONNECT from the server: closed
    assert refused(bridge)["packet_too_large"] == 2

    small = await clients.accepted(port, "ps-small", MQTT_3_1_1)
    await small.send(Publish("ps/small", b"fits", qos=1, packet_id=1))
    assert await small.recv() == Puback(1)
    delivered = await watcher.recv()  # the first and only message the watcher gets
    assert isinstance(delivered, Publish) and (delivered.topic, delivered.payload) == ("ps/small", b"fits")


async def test_max_offline_bytes_drops_the_oldest_counted_and_logged(
    clients: Dialer, make_bridge: BridgeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    bridge = await make_bridge(rules="", extra_config="broker.max_offline_bytes = 1KB\n")
    port = mqtt_port(bridge)
    keeper = await clients.accepted(port, "ob-keeper", MQTT_3_1_1, clean=False)
    await keeper.send(Subscribe(1, [Subscription("ob/t", 1)]))
    assert await keeper.recv() == Suback(1, [1])
    await keeper.send(Disconnect())
    assert await keeper.recv() is None
    watcher = await clients.accepted(port, "ob-watch", MQTT_3_1_1)
    await watcher.send(Subscribe(1, [Subscription("ob/t", 0)]))
    assert await watcher.recv() == Suback(1, [0])

    publisher = await clients.accepted(port, "ob-pub", MQTT_3_1_1)
    # over 512 bytes each with the topic (and the broker's bookkeeping): one fits in 1KB
    payloads = [bytes([ord("a") + i]) * 600 for i in range(5)]
    with caplog.at_level(logging.WARNING):
        for packet_id, payload in enumerate(payloads, 1):
            await publisher.send(Publish("ob/t", payload, qos=1, packet_id=packet_id))
            assert await publisher.recv() == Puback(packet_id)
        # routed to every subscriber at once: when the watcher has the last, the keeper's queue had all
        for payload in payloads:
            got = await watcher.recv()
            assert isinstance(got, Publish) and got.payload == payload
    assert refused(bridge)["offline_bytes"] == 4
    assert dropped(bridge) == "4.0"
    assert any("ob-keeper" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)

    keeper, connack = await clients.open(port, Connect("ob-keeper", clean_start=False))
    assert isinstance(connack, Connack) and connack.session_present
    kept = [await keeper.recv() for _ in payloads[4:]]
    assert [p.payload for p in kept if isinstance(p, Publish)] == payloads[4:]


@pytest.mark.parametrize(("level", "code"), [(MQTT_3_1_1, 2), (MQTT_5, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID)])
async def test_max_clientid_len_refuses_at_connect(
    clients: Dialer, make_bridge: BridgeFactory, level: int, code: int
) -> None:
    bridge = await make_bridge(rules="", extra_config="broker.max_clientid_len = 23\n")
    port = mqtt_port(bridge)
    await clients.accepted(port, "c" * 23, level)
    client, connack = await clients.open(port, Connect("c" * 24, protocol_level=level))
    assert isinstance(connack, Connack) and connack.reason_code == code
    assert await client.recv() is None
    assert refused(bridge)["clientid_too_long"] == 1


@pytest.mark.parametrize(("level", "code"), [(MQTT_3_1_1, 0x80), (MQTT_5, ReasonCode.QUOTA_EXCEEDED)])
async def test_max_subscriptions_refuses_the_filter_over_it(
    clients: Dialer, make_bridge: BridgeFactory, level: int, code: int
) -> None:
    bridge = await make_bridge(rules="", extra_config="broker.max_subscriptions = 2\n")
    client = await clients.accepted(mqtt_port(bridge), "subs", level)
    await client.send(Subscribe(1, [Subscription("a", 1), Subscription("b", 1), Subscription("c", 1)]))
    assert await client.recv() == Suback(1, [1, 1, code])
    await client.send(Subscribe(2, [Subscription("a", 0)]))  # the same filter again replaces it: no new one
    assert await client.recv() == Suback(2, [0])
    assert refused(bridge)["max_subscriptions"] == 1


def user_properties(count: int) -> Properties:
    return Properties(user_property=tuple((f"k{i}", "v") for i in range(count)))


@pytest.mark.parametrize(
    ("count", "settings", "code"),
    [
        (40_000, "", ReasonCode.PACKET_TOO_LARGE),
        (
            150_000,
            "broker.max_user_properties = 0\nbroker.max_packet_size = 4MB\n",
            ReasonCode.BAD_USER_NAME_OR_PASSWORD,
        ),
    ],
)
async def test_a_connect_with_many_user_properties_is_refused_while_others_are_served(
    clients: Dialer, make_bridge: BridgeFactory, tmp_path: Path, count: int, settings: str, code: int
) -> None:
    """A regression (docs/brokers.md#limits): user properties decoded in quadratic time froze the whole broker (40,000:
    seconds; 150,000: over a minute) before the wrong password was even checked. Over the
    default limit the CONNECT is refused with 0x95 and counted; with no limit (0) it is decoded,
    in linear time, and refused for its password. Meanwhile a client already connected gets its
    PINGRESPs, one per piece of the big CONNECT sent, and one after it: TIMEOUT (10 s) per answer
    is generous for a linear decode and far under the quadratic freeze of 150,000. The broker
    runs in this test's event loop, so a freeze also holds the client's timeout: each round trip
    is measured on the wall clock instead."""
    passwords = tmp_path / "passwd"
    await asyncio.to_thread(
        subprocess.run, ["mosquitto_passwd", "-c", "-b", str(passwords), "alice", "right"], check=True
    )
    bridge = await make_bridge(
        rules="", extra_config=f"broker.allow_anonymous = false\nbroker.auth.password_file = {passwords}\n{settings}"
    )
    port = mqtt_port(bridge)
    login = Connect("up-other", protocol_level=MQTT_5, username="alice", password=b"right")
    other, connack = await clients.open(port, login)
    assert isinstance(connack, Connack) and connack.reason_code == 0
    big = Connect(
        "up-big", protocol_level=MQTT_5, username="alice", password=b"wrong", properties=user_properties(count)
    )
    data = encode(big, MQTT_5)
    attacker = CodecClient(*await asyncio.open_connection("127.0.0.1", port), MQTT_5)
    clients.made.append(attacker)
    pings, piece = 0, 64 << 10

    async def ping() -> None:
        began = time.monotonic()
        await other.send(Pingreq())
        assert await other.recv() == Pingresp()
        assert time.monotonic() - began < TIMEOUT, "the broker froze"

    for start in range(0, len(data), piece):  # the CONNECT in pieces, a PINGREQ answered after each
        attacker.writer.write(data[start : start + piece])
        await ping()
        pings += 1
    await attacker.writer.drain()
    await ping()
    answer = await attacker.recv()
    assert isinstance(answer, Connack) and answer.reason_code == code, answer
    assert await attacker.recv() is None
    await ping()
    assert pings == -(-len(data) // piece)
    too_many = code == ReasonCode.PACKET_TOO_LARGE
    assert refused(bridge)["user_properties"] == (1 if too_many else 0)
    assert refused(bridge)["login_bad_credentials"] == (0 if too_many else 1)


# -- the work of one SUBSCRIBE (docs/brokers.md#limits) ----------------------------------------------------

RETAINED = 10_000
COPIES = 10_000


async def test_repeated_filter_walks_the_retained_messages_once(clients: Dialer, make_bridge: BridgeFactory) -> None:
    """docs/brokers.md#limits (`broker.max_subscribe_filters`): one SUBSCRIBE repeating `#` 10,000 times beside 10,000 retained messages."""
    bridge = await make_bridge(rules="")
    port = mqtt_port(bridge)
    publisher = await clients.accepted(port, "sb-pub", MQTT_3_1_1)
    retained = b"".join(
        encode(Publish(f"sb/{i}", str(i).encode(), qos=0, retain=True), MQTT_3_1_1) for i in range(RETAINED)
    )
    publisher.writer.write(retained)
    # deliveries of one publisher keep order: once this is acknowledged, every retained one is in
    await publisher.send(Publish("sb-done", b"", qos=1, packet_id=1))
    assert await publisher.recv() == Puback(1)

    subscriber = await clients.accepted(port, "sb-sub", MQTT_3_1_1)
    # the later entry's options win: QoS 0 in every copy but the last, which asks for QoS 1
    filters = [Subscription("#", 0)] * (COPIES - 1) + [Subscription("#", 1)]
    await subscriber.send(Subscribe(7, filters))
    assert await subscriber.recv() == Suback(7, [1] * COPIES)  # one code per entry, the last one's
    topics = []
    for _ in range(RETAINED):
        got = await subscriber.recv()
        assert isinstance(got, Publish) and got.retain, got
        topics.append(got.topic)
    assert sorted(topics) == sorted(f"sb/{i}" for i in range(RETAINED))  # each once
    # and nothing more: the next message the subscriber gets is a live one published now
    await publisher.send(Publish("sb/live", b"live", qos=1, packet_id=2))
    assert await publisher.recv() == Puback(2)
    got = await subscriber.recv()
    assert isinstance(got, Publish) and (got.topic, got.payload, got.retain, got.qos) == ("sb/live", b"live", False, 1)


@pytest.mark.parametrize(("level", "code"), [(MQTT_3_1_1, 0x80), (MQTT_5, ReasonCode.QUOTA_EXCEEDED)])
async def test_max_subscribe_filters_refuses_the_filters_past_it(
    clients: Dialer, make_bridge: BridgeFactory, level: int, code: int
) -> None:
    bridge = await make_bridge(rules="", extra_config="broker.max_subscribe_filters = 2\n")
    client = await clients.accepted(mqtt_port(bridge), "sf", level)
    # a repeated filter counts once: a and b are the two, c and d are past the limit
    filters = [Subscription(f, 1) for f in ("a", "b", "a", "c", "b", "d")]
    await client.send(Subscribe(1, filters))
    assert await client.recv() == Suback(1, [1, 1, 1, code, 1, code])
    assert refused(bridge)["subscribe_filters"] == 2
    await client.send(Subscribe(2, [Subscription("c", 0)]))  # the connection is still served
    assert await client.recv() == Suback(2, [0])
    await client.send(Publish("a", b"one", qos=1, packet_id=3))  # subscribed once to a
    got = [await client.recv(), await client.recv()]
    assert Puback(3) in got
    assert [(p.topic, p.payload) for p in got if isinstance(p, Publish)] == [("a", b"one")]
    await client.send(Publish("c", b"two", qos=1, packet_id=4))
    got = [await client.recv(), await client.recv()]
    assert Puback(4) in got
    assert [(p.topic, p.payload) for p in got if isinstance(p, Publish)] == [("c", b"two")]
