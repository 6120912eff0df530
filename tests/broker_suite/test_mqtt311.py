"""MQTT 3.1.1 behaviour docs/brokers.md#what-it-guarantees lists, with paho-mqtt v2 speaking 3.1.1 (raw bytes only where paho refuses).

Negative checks ("nothing else arrived") publish a marker afterwards and wait for it: deliveries
to one client keep publish order, so anything the broker sent in between arrives first.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest

from broker_suite.brokers import Broker
from support import frames
from support.mqtt import V311, Client, Will, unique
from support.raw import RawClient

Clients = Callable[..., Client]


async def connected(
    clients: Clients,
    clientid: str,
    *,
    clean: bool = True,
    manual_ack: bool = False,
    keepalive: int = 60,
    will: Will | None = None,
) -> Client:
    """A 3.1.1 client whose CONNECT was accepted."""
    client = clients(clientid, version=V311, clean=clean, manual_ack=manual_ack)
    assert (await client.connect(keepalive=keepalive, will=will)).reason == 0
    return client


async def test_session_present_only_when_a_persistent_session_is_resumed(clients: Clients) -> None:
    cid = unique("sp")
    seen = []
    for clean in (False, False, True, False):
        client = clients(cid, version=V311, clean=clean)
        seen.append((await client.connect()).session_present)
        await client.disconnect()
    # new session; resumed; clean session discards it; so the next persistent one is new again
    assert seen == [False, True, False, False]


async def test_qos1_and_qos2_queued_for_an_offline_persistent_session(clients: Clients) -> None:
    cid, topic = unique("offline"), unique("q")
    sub = await connected(clients, cid, clean=False)
    assert await sub.subscribe(f"{topic}/#", 2) == [2]
    await sub.disconnect()

    pub = await connected(clients, unique("pub"))
    for n, qos in enumerate((1, 2, 1, 2)):
        await pub.publish(f"{topic}/{n}", f"m{n}".encode(), qos)

    back = await connected(clients, cid, clean=False)
    got = await back.expect(4)
    # paho hands a QoS 2 message over at PUBREL, so order holds within each QoS only
    for qos in (1, 2):
        assert [(m.topic, m.payload, m.retain) for m in got if m.qos == qos] == [
            (f"{topic}/{n}", f"m{n}".encode(), False) for n, q in enumerate((1, 2, 1, 2)) if q == qos
        ]
    await pub.publish(f"{topic}/end", b"marker", 1)
    assert await back.until(f"{topic}/end", b"marker") == []


async def test_unacknowledged_qos1_redelivered_with_dup_on_reconnect(clients: Clients) -> None:
    cid, topic = unique("dup1"), unique("d")
    sub = await connected(clients, cid, clean=False, manual_ack=True)
    await sub.subscribe(topic, 1)
    pub = await connected(clients, unique("pub"))
    await pub.publish(topic, b"unacked", 1)
    first = await sub.message()
    assert (first.payload, first.dup) == (b"unacked", False)
    await sub.drop()  # never acknowledged

    back = await connected(clients, cid, clean=False)
    again = await back.message()
    assert (again.topic, again.payload, again.qos, again.dup) == (topic, b"unacked", 1, True)


async def test_unreceived_qos2_redelivered_with_dup_and_the_same_packet_id(broker: Broker, clients: Clients) -> None:
    """paho answers PUBREC on its own, so the subscriber that withholds it is raw bytes."""
    cid, topic = unique("dup2"), unique("d")
    sub = await RawClient.open(broker.port)
    await sub.send_bytes(frames.connect(cid, version=4, clean=False))
    assert (await sub.next_frame()).reason == 0
    await sub.send_bytes(frames.subscribe(topic, qos=2, packet_id=1, version=4))
    assert (await sub.next_frame()).kind == frames.SUBACK
    pub = await connected(clients, unique("pub"))
    await pub.publish(topic, b"exactly once", 2)
    first = await sub.recv_frame()
    assert first is not None and first.kind == frames.PUBLISH and not first.dup
    sub.abort()  # no PUBREC

    back = await RawClient.open(broker.port)
    await back.send_bytes(frames.connect(cid, version=4, clean=False))
    connack = await back.recv_frame()
    assert connack is not None and connack.body[0] == 1  # session present
    again = await back.recv_frame()
    assert again is not None and again.kind == frames.PUBLISH and again.dup
    assert again.publish_fields(4) == first.publish_fields(4) == (topic, first.publish_fields(4)[1], b"exactly once")
    await back.send_bytes(frames.ack(frames.PUBREC, again.publish_fields(4)[1]))
    assert (await back.next_frame()).kind == frames.PUBREL
    back.abort()


PINGRESP = b"\xd0\x00"


def _read_to_end(sock: socket.socket) -> bytes:
    """What is left to read until the peer closes (a PINGRESP to an earlier PINGREQ may be pending)."""
    data = b""
    while chunk := sock.recv(64):
        data += chunk
    return data


async def test_keepalive_enforced_and_the_will_published(clients: Clients) -> None:
    topic = unique("will")
    watcher = await connected(clients, unique("watch"))
    await watcher.subscribe(topic, 1)
    lively = await connected(clients, unique("lively"), keepalive=1)  # pings on time: must stay
    silent = await connected(clients, unique("silent"), keepalive=1, will=Will(topic, b"gone", 1))
    sock = silent.paho.socket()
    assert isinstance(sock, socket.socket)
    await silent.freeze()  # no PINGREQ from now on, socket left open

    # 1.5 s of silence is the rule; how soon after that a broker notices is not (Mosquitto 2.0.11
    # took over 5 s now and then in the full suite): the test waits for the will, not a deadline.
    will = await watcher.message(timeout=20)
    assert (will.topic, will.payload, will.qos) == (topic, b"gone", 1)
    sock.setblocking(True)
    sock.settimeout(2)
    assert await asyncio.to_thread(_read_to_end, sock) in (b"", PINGRESP)  # the broker closed it
    await lively.publish(topic, b"still here", 1)
    assert (await watcher.message()).payload == b"still here"


async def test_retained_set_replaced_deleted_and_delivered_to_wildcards(clients: Clients) -> None:
    root = unique("ret")
    early = await connected(clients, unique("early"))
    await early.subscribe(f"{root}/#", 1)
    pub = await connected(clients, unique("pub"))
    await pub.publish(f"{root}/a", b"v1", 1, retain=True)
    await pub.publish(f"{root}/a", b"v2", 1, retain=True)
    await pub.publish(f"{root}/b/c", b"kept", 1, retain=True)
    await pub.publish(f"{root}/d", b"soon deleted", 1, retain=True)
    await pub.publish(f"{root}/d", b"", 1, retain=True)
    live = await early.expect(5)
    # an established subscription gets them as live messages: retain flag 0 (3.1.1 section 3.3.1.3)
    assert [(m.payload, m.retain) for m in live] == [
        (b"v1", False),
        (b"v2", False),
        (b"kept", False),
        (b"soon deleted", False),
        (b"", False),
    ]

    for topic_filter in (f"{root}/#", f"{root}/+", f"+/a", f"{root}/+/c"):  # noqa: F541
        late = await connected(clients, unique("late"))
        await late.subscribe(topic_filter, 1)
        await late.subscribe(f"{root}/end", 1)
        await pub.publish(f"{root}/end", b"marker", 1)
        got = {(m.topic, m.payload, m.retain) for m in await late.until(f"{root}/end", b"marker")}
        expected = {
            f"{root}/#": {(f"{root}/a", b"v2", True), (f"{root}/b/c", b"kept", True)},
            f"{root}/+": {(f"{root}/a", b"v2", True)},
            "+/a": {(f"{root}/a", b"v2", True)},
            f"{root}/+/c": {(f"{root}/b/c", b"kept", True)},
        }[topic_filter]
        if topic_filter == "+/a":  # other tests' retained messages on */a do not count
            got = {m for m in got if m[0].startswith(root)}
        assert got == expected, topic_filter
        await late.disconnect()


@pytest.mark.mosquitto_deviates("Mosquitto 2.0.11 sends one copy at the QoS of the last subscription (MQTT-3.3.5-1)")
async def test_overlapping_subscriptions_deliver_at_the_highest_granted_qos(clients: Clients) -> None:
    root = unique("over")
    sub = await connected(clients, unique("sub"))
    assert await sub.subscribe(f"{root}/#", 2) == [2]
    assert await sub.subscribe(f"{root}/+", 1) == [1]
    pub = await connected(clients, unique("pub"))
    await pub.publish(f"{root}/x", b"both match", 2)
    # a QoS 2 marker that only `#` matches: paho hands QoS 2 messages over at PUBREL, in order
    await pub.publish(f"{root}/m/end", b"marker", 2)
    copies = await sub.until(f"{root}/m/end", b"marker")
    # 3.1.1 section 3.3.5: at least one copy at the maximum QoS; a broker MAY send one per subscription
    assert 1 <= len(copies) <= 2 and all(m.payload == b"both match" for m in copies)
    assert max(m.qos for m in copies) == 2


async def test_dollar_topics_not_matched_by_leading_wildcards(clients: Clients) -> None:
    """A `$` topic reaches a filter that names its first level, never `#` or `+/...` (4.7.2)."""
    name = unique("dollar")
    wild = await connected(clients, unique("wild"))
    for topic_filter in ("#", f"+/{name}", "+/+"):
        await wild.subscribe(topic_filter, 1)
    exact = await connected(clients, unique("exact"))
    await exact.subscribe(f"${name}/#", 1)
    pub = await connected(clients, unique("pub"))
    await pub.publish(f"${name}/{name}", b"dollar", 1)
    await pub.publish(f"{name}/{name}", b"marker", 1)

    assert (await exact.message()).topic == f"${name}/{name}"
    got = await wild.until(f"{name}/{name}", b"marker")  # retained messages of other tests may come first
    assert [m.topic for m in got if m.topic.startswith("$")] == []


async def test_zero_length_client_id_accepted_with_clean_session(clients: Clients) -> None:
    topic = unique("anon")
    anonymous = await connected(clients, "")
    await anonymous.subscribe(topic, 1)
    await anonymous.publish(topic, b"to myself", 1)
    assert (await anonymous.message()).payload == b"to myself"


async def test_zero_length_client_id_refused_without_clean_session(broker: Broker) -> None:
    """paho refuses to send this CONNECT, so it is raw bytes."""
    client = await RawClient.open(broker.port)
    try:
        await client.send_bytes(frames.connect("", version=4, clean=False))
        packets = await client.frames_until_closed()
        assert [(p.kind, p.reason) for p in packets] == [(frames.CONNACK, 2)]  # identifier rejected
    finally:
        client.abort()
