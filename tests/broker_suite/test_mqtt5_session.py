"""MQTT 5.0 connection and session behaviour (docs/brokers.md#what-it-guarantees), with paho-mqtt v2 speaking 5.0.

Where time is the feature (session expiry, message expiry, will delay) the intervals are one or
two seconds and the test sleeps past them; everything else waits on packets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from paho.mqtt.packettypes import PacketTypes

from broker_suite.brokers import Broker
from support import frames
from support.mqtt import Client, Will, connect_v5, unique
from support.mqtt_properties import props
from support.raw import RawClient

Clients = Callable[..., Client]

# reason codes (MQTT 5.0 section 2.4)
SESSION_TAKEN_OVER = 0x8E
UNSUPPORTED_PROTOCOL_VERSION = 0x84


async def test_connack_reason_codes(broker: Broker, clients: Clients) -> None:
    _client, connack = await connect_v5(clients, unique("ok"))
    assert (connack.reason, connack.session_present) == (0, False)

    # A protocol level the broker does not speak: CONNACK 0x84 (5.0) or return code 1 (3.1.1), then close.
    client = await RawClient.open(broker.port)
    try:
        await client.send_bytes(frames.connect(unique("v6"), version=6))
        packets = await client.frames_until_closed()
        assert [p.kind for p in packets] == [frames.CONNACK]
        assert packets[0].reason in (UNSUPPORTED_PROTOCOL_VERSION, 1)
    finally:
        client.abort()


async def test_assigned_client_identifier_names_a_resumable_session(clients: Clients) -> None:
    first, connack = await connect_v5(clients, "", clean=False, SessionExpiryInterval=60)
    assigned = connack.properties.get("AssignedClientIdentifier")
    assert isinstance(assigned, str) and assigned
    await first.disconnect()
    _again, resumed = await connect_v5(clients, assigned, clean=False, SessionExpiryInterval=60)
    assert resumed.session_present
    assert "AssignedClientIdentifier" not in resumed.properties  # only for an empty client id


async def test_server_keep_alive_caps_a_longer_keepalive(clients: Clients) -> None:
    """The suite's Mosquitto caps keepalive at 60 s (`max_keepalive`); paho then pings at that interval."""
    _short, within = await connect_v5(clients, unique("ka30"), keepalive=30)
    assert within.properties.get("ServerKeepAlive", 30) == 30
    capped_client, capped = await connect_v5(clients, unique("ka120"), keepalive=120)
    assert capped.properties["ServerKeepAlive"] == 60
    assert capped_client.paho.keepalive == 60


async def test_session_expiry_interval(clients: Clients) -> None:
    cid, topic = unique("expiry"), unique("se")
    sub, _ = await connect_v5(clients, cid, clean=False, SessionExpiryInterval=60)
    await sub.subscribe(topic, 1)
    await sub.disconnect()
    # within the interval: kept; the new CONNECT's interval (1 s) is the one its disconnect starts
    again, resumed = await connect_v5(clients, cid, clean=False, SessionExpiryInterval=1)
    assert resumed.session_present
    await again.disconnect()
    await asyncio.sleep(2.5)  # the feature is time: 1 s, and Mosquitto checks expiry once a second
    fresh, expired = await connect_v5(clients, cid, clean=False, SessionExpiryInterval=1)
    assert not expired.session_present
    # the subscription went with the session
    pub, _ = await connect_v5(clients, unique("pub"))
    await fresh.subscribe(f"{topic}/end", 1)
    await pub.publish(topic, b"to the old subscription", 1)
    await pub.publish(f"{topic}/end", b"marker", 1)
    assert await fresh.until(f"{topic}/end", b"marker") == []

    # expiry 0 (the default): the session ends with the connection
    zero, _ = await connect_v5(clients, unique("zero"), clean=False)
    cid0 = zero.paho._client_id.decode()
    await zero.disconnect()
    _back, connack = await connect_v5(clients, cid0, clean=False)
    assert not connack.session_present


async def test_message_expiry_interval(clients: Clients) -> None:
    """An expired message is never delivered from a session's queue, nor as a retained message;
    a surviving one carries the interval minus the time it waited (5.0 section 3.3.2.3.3)."""
    cid, topic = unique("mexp"), unique("me")
    sub, _ = await connect_v5(clients, cid, clean=False, SessionExpiryInterval=60)
    await sub.subscribe(f"{topic}/#", 1)
    await sub.disconnect()
    pub, _ = await connect_v5(clients, unique("pub"))
    await pub.publish(f"{topic}/short", b"expires", 1, properties=props(PacketTypes.PUBLISH, MessageExpiryInterval=1))
    await pub.publish(f"{topic}/long", b"lives", 1, properties=props(PacketTypes.PUBLISH, MessageExpiryInterval=60))
    await pub.publish(f"{topic}/none", b"no expiry", 1)
    retained = props(PacketTypes.PUBLISH, MessageExpiryInterval=1)
    await pub.publish(f"{topic}/retained", b"expires too", 1, retain=True, properties=retained)
    await asyncio.sleep(2.1)  # the feature is time: let the 1 s interval run out

    back, _ = await connect_v5(clients, cid, clean=False, SessionExpiryInterval=60)
    await pub.publish(f"{topic}/end", b"marker", 1)
    got = await back.until(f"{topic}/end", b"marker")
    assert [(m.topic, m.payload) for m in got] == [(f"{topic}/long", b"lives"), (f"{topic}/none", b"no expiry")]
    assert 0 < got[0].properties["MessageExpiryInterval"] < 60
    assert "MessageExpiryInterval" not in got[1].properties

    late, _ = await connect_v5(clients, unique("late"))
    await late.subscribe(f"{topic}/#", 1)
    await pub.publish(f"{topic}/end", b"marker", 1)
    assert await late.until(f"{topic}/end", b"marker") == []


async def test_will_delay_interval(clients: Clients) -> None:
    topic = unique("wd")
    watcher, _ = await connect_v5(clients, unique("watch"))
    await watcher.subscribe(f"{topic}/#", 1)
    will_props = props(PacketTypes.WILLMESSAGE, WillDelayInterval=1)

    # back within the delay: the will is not sent
    cid = unique("back")
    returning, _ = await connect_v5(
        clients,
        cid,
        clean=False,
        will=Will(f"{topic}/back", b"should not", 1, properties=will_props),
        SessionExpiryInterval=60,
    )
    await returning.drop()
    await connect_v5(clients, cid, clean=False, SessionExpiryInterval=60)
    # gone for good: the will is sent once the delay has passed
    leaving, _ = await connect_v5(
        clients,
        unique("gone"),
        will=Will(f"{topic}/gone", b"delayed will", 1, properties=will_props),
        SessionExpiryInterval=60,
    )
    await leaving.drop()
    will = await watcher.message()
    assert (will.topic, will.payload) == (f"{topic}/gone", b"delayed will")


@pytest.mark.mosquitto_deviates("Mosquitto 2.0.11 waits out the will delay after a session with expiry 0 ended")
async def test_will_sent_when_the_session_ends_before_the_delay(clients: Clients) -> None:
    """5.0 section 3.1.3.2.2: the will waits for the delay or the end of the session, whichever is first."""
    topic = unique("we")
    watcher, _ = await connect_v5(clients, unique("watch"))
    await watcher.subscribe(f"{topic}/#", 1)
    long_delay = props(PacketTypes.WILLMESSAGE, WillDelayInterval=3600)
    will = Will(f"{topic}/ends", b"session over", 1, properties=long_delay)
    ending, _ = await connect_v5(clients, unique("ends"), will=will)  # session expiry 0: ends with the connection
    await ending.drop()
    message = await watcher.message(timeout=3)
    assert (message.topic, message.payload) == (f"{topic}/ends", b"session over")


async def test_disconnect_with_will_message_0x04_sends_the_will(clients: Clients) -> None:
    topic = unique("dw")
    watcher, _ = await connect_v5(clients, unique("watch"))
    await watcher.subscribe(f"{topic}/#", 1)
    normal, _ = await connect_v5(clients, unique("normal"), will=Will(f"{topic}/normal", b"not sent", 1))
    await normal.disconnect("Normal disconnection")
    with_will, _ = await connect_v5(clients, unique("with"), will=Will(f"{topic}/with", b"sent", 1))
    await with_will.disconnect("Disconnect with will message")
    will = await watcher.message()  # the normal disconnection's will would have come first
    assert (will.topic, will.payload) == (f"{topic}/with", b"sent")


async def test_session_takeover_closes_the_old_connection_with_0x8e(broker: Broker, clients: Clients) -> None:
    """The broker MAY send DISCONNECT before it closes (5.0 sections 3.1.4, 4.13); if it does, the
    reason is 0x8E. Read off the wire: a client library may report a closed socket as a reason."""
    cid = unique("taken")
    first = await RawClient.open(broker.port)
    try:
        await first.send_bytes(frames.connect(cid, version=5))
        assert (await first.next_frame()).reason == 0
        await connect_v5(clients, cid)
        packets = await first.frames_until_closed()
        assert [(p.kind, p.reason) for p in packets] in ([], [(frames.DISCONNECT, SESSION_TAKEN_OVER)])
    finally:
        first.abort()
