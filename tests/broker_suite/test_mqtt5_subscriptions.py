"""MQTT 5.0 subscriptions: SUBACK reason codes, subscription options, subscription identifiers,
shared subscriptions (from 5.0 and 3.1.1 clients), and message properties forwarded unchanged
to paho and to gmqtt subscribers.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import gmqtt
import pytest
from paho.mqtt.packettypes import PacketTypes

from broker_suite.brokers import Broker
from support.mqtt import V311, Client, connect_v5, unique
from support.mqtt_properties import props

Clients = Callable[..., Client]


async def test_suback_reason_codes(clients: Clients) -> None:
    root = unique("suback")
    sub, _ = await connect_v5(clients, unique("sub"))
    # reason codes 0x00-0x02: granted QoS (failure codes need an ACL or a limit: tests/integration/test_broker_acl.py, test_broker_limits.py)
    assert [await sub.subscribe(f"{root}/{qos}", qos) for qos in (0, 1, 2)] == [[0], [1], [2]]
    assert await sub.subscribe(f"$share/{root}/{root}/#", 2) == [2]


async def test_no_local(clients: Clients) -> None:
    topic = unique("nl")
    talker, _ = await connect_v5(clients, unique("talker"))
    await talker.subscribe(topic, 1, no_local=True)
    await talker.subscribe(f"{topic}/end", 1)
    other, _ = await connect_v5(clients, unique("other"))
    await other.subscribe(topic, 1)
    await talker.publish(topic, b"own", 1)
    assert (await other.message()).payload == b"own"
    await other.publish(topic, b"from other", 1)
    await talker.publish(f"{topic}/end", b"marker", 1)
    assert [m.payload for m in await talker.until(f"{topic}/end", b"marker")] == [b"from other"]


async def test_retain_as_published(clients: Clients) -> None:
    topic = unique("rap")
    keeps, _ = await connect_v5(clients, unique("keeps"))
    await keeps.subscribe(topic, 1, retain_as_published=True)
    clears, _ = await connect_v5(clients, unique("clears"))
    await clears.subscribe(topic, 1)
    pub, _ = await connect_v5(clients, unique("pub"))
    await pub.publish(topic, b"retained", 1, retain=True)
    await pub.publish(topic, b"plain", 1)
    assert [(m.payload, m.retain) for m in await keeps.expect(2)] == [(b"retained", True), (b"plain", False)]
    assert [(m.payload, m.retain) for m in await clears.expect(2)] == [(b"retained", False), (b"plain", False)]


@pytest.mark.parametrize(("handling", "at_first", "at_again"), [(0, True, True), (1, True, False), (2, False, False)])
async def test_retain_handling(clients: Clients, handling: int, at_first: bool, at_again: bool) -> None:
    """0: retained messages at every subscribe; 1: only when the subscription is new; 2: never."""
    topic = unique("rh")
    pub, _ = await connect_v5(clients, unique("pub"))
    await pub.publish(topic, b"retained", 1, retain=True)
    sub, _ = await connect_v5(clients, unique("sub"))
    await sub.subscribe(f"{topic}/end", 1)
    for expected in (at_first, at_again):
        await sub.subscribe(topic, 1, retain_handling=handling)
        await pub.publish(f"{topic}/end", b"marker", 1)
        got = [(m.payload, m.retain) for m in await sub.until(f"{topic}/end", b"marker")]
        assert got == ([(b"retained", True)] if expected else [])


async def test_subscription_identifiers(clients: Clients) -> None:
    root = unique("sid")
    sub, connack = await connect_v5(clients, unique("sub"))
    assert connack.properties.get("SubscriptionIdentifierAvailable", 1) == 1
    await sub.subscribe(f"{root}/#", 1, subscription_id=7)
    await sub.subscribe(f"{root}/+", 1, subscription_id=300)  # two bytes as a variable byte integer
    await sub.subscribe(f"{root}/end/marker", 1)
    pub, _ = await connect_v5(clients, unique("pub"))
    await pub.publish(f"{root}/x", b"both", 1)
    await pub.publish(f"{root}/a/b", b"only #", 1)
    await pub.publish(f"{root}/end/marker", b"marker", 1)
    got = await sub.until(f"{root}/end/marker", b"marker")
    # one copy per subscription, or one copy with both identifiers (5.0 section 3.3.4)
    ids = Counter(i for m in got if m.payload == b"both" for i in m.properties["SubscriptionIdentifier"])
    assert ids == Counter({7: 1, 300: 1})
    only = [m.properties["SubscriptionIdentifier"] for m in got if m.payload == b"only #"]
    assert only == [[7]]


async def test_shared_subscription_delivers_each_message_to_one_member(broker: Broker, clients: Clients) -> None:
    topic, group = unique("shared"), unique("g")
    members = []
    for version in (5, 5, 4):  # MQTT 3.1.1 clients may join a shared subscription too
        member = clients(unique(f"member{version}"), version=V311 if version == 4 else 5)
        assert (await member.connect()).reason == 0
        assert await member.subscribe(f"$share/{group}/{topic}/#", 1) == [1]
        members.append(member)
    plain, _ = await connect_v5(clients, unique("plain"))
    await plain.subscribe(f"{topic}/#", 1)
    pub, _ = await connect_v5(clients, unique("pub"))
    sent = [f"m{n}".encode() for n in range(12)]
    for payload in sent:
        await pub.publish(f"{topic}/x", payload, 1)

    assert [m.payload for m in await plain.expect(len(sent))] == sent
    # Each member's share ends at a marker of its own, on a topic outside the shared filter (a
    # marker under it would itself be shared out to some member).
    shared: list[bytes] = []
    for member in members:
        await member.subscribe(f"end-{topic}/{member.paho._client_id.decode()}", 1)
        await pub.publish(f"end-{topic}/{member.paho._client_id.decode()}", b"end", 1)
    for member in members:
        received = await member.until(f"end-{topic}/{member.paho._client_id.decode()}", b"end")
        shared += [m.payload for m in received]
    assert sorted(shared) == sorted(sent)  # every message once, no duplicates


async def test_shared_subscription_from_a_311_client(clients: Clients) -> None:
    """`$share/<group>/<filter>` from MQTT 3.1.1 clients too (docs/brokers.md#what-it-guarantees); the only member gets every message."""
    topic, group = unique("shared311"), unique("g")
    member = clients(unique("m311"), version=V311)
    assert (await member.connect()).reason == 0
    assert await member.subscribe(f"$share/{group}/{topic}/#", 1) == [1]
    pub = clients(unique("pub"), version=V311)
    assert (await pub.connect()).reason == 0
    for n in range(3):
        await pub.publish(f"{topic}/x", f"m{n}".encode(), 1)
    got = await member.expect(3)
    assert [(m.topic, m.payload) for m in got] == [(f"{topic}/x", f"m{n}".encode()) for n in range(3)]


FORWARDED = {
    "UserProperty": [("b", "2"), ("a", "1"), ("a", "3")],  # order and repeats kept (5.0 section 3.3.2.3.7)
    "ContentType": "application/json; charset=utf-8",
    "PayloadFormatIndicator": 1,
    "ResponseTopic": "replies/for/me",
    "CorrelationData": b"\x00\x01corr\xff",
}


@dataclass
class GmqttSubscriber:
    client: Any
    messages: asyncio.Queue[tuple[str, bytes, dict[str, Any]]]
    subscribed: asyncio.Future[None]

    async def subscribe(self, topic: str) -> None:
        self.client.subscribe(topic, qos=1)
        await asyncio.wait_for(self.subscribed, 5)


@pytest.fixture
async def gmqtt_subscriber(broker: Broker) -> AsyncIterator[GmqttSubscriber]:
    """A gmqtt 0.8 client (MQTT 5.0): a second implementation reads the same properties."""
    loop = asyncio.get_running_loop()
    subscriber = GmqttSubscriber(gmqtt.Client(unique("gmqtt")), asyncio.Queue(), loop.create_future())

    def on_message(_client: Any, topic: str, payload: bytes, _qos: int, properties: dict[str, Any]) -> int:
        subscriber.messages.put_nowait((topic, payload, properties))
        return 0  # PUBACK reason code

    def on_subscribe(*_args: Any) -> None:
        if not subscriber.subscribed.done():
            subscriber.subscribed.set_result(None)

    subscriber.client.on_message = on_message
    subscriber.client.on_subscribe = on_subscribe
    await subscriber.client.connect("127.0.0.1", broker.port)
    yield subscriber
    await subscriber.client.disconnect()


async def test_message_properties_forwarded_unchanged(clients: Clients, gmqtt_subscriber: GmqttSubscriber) -> None:
    topic = unique("props")
    paho_sub, _ = await connect_v5(clients, unique("sub"))
    await paho_sub.subscribe(topic, 1)
    await gmqtt_subscriber.subscribe(topic)
    pub, _ = await connect_v5(clients, unique("pub"))
    await pub.publish(topic, b'{"ok": true}', 1, properties=props(PacketTypes.PUBLISH, **FORWARDED))

    message = await paho_sub.message()
    assert message.payload == b'{"ok": true}'
    assert {k: v for k, v in message.properties.items() if k in FORWARDED} == FORWARDED
    g_topic, g_payload, g_props = await asyncio.wait_for(gmqtt_subscriber.messages.get(), 5)
    assert (g_topic, g_payload) == (topic, b'{"ok": true}')
    assert {
        k: g_props.get(k)
        for k in ("user_property", "content_type", "payload_format_id", "response_topic", "correlation_data")
    } == {
        "user_property": FORWARDED["UserProperty"],
        "content_type": [FORWARDED["ContentType"]],
        "payload_format_id": [1],
        "response_topic": [FORWARDED["ResponseTopic"]],
        "correlation_data": [FORWARDED["CorrelationData"]],
    }
