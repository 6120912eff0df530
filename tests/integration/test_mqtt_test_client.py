"""The MQTT test client (tests/support/mqtt.py) fails a test when what it waits for does not
happen: every other test's assertions on deliveries and CONNACKs rest on that. Against the
embedded broker alone (docs/testing.md#which-mqtt-client)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.app import Bridge
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import V5, Client, wait_until


@pytest.fixture
async def bridge(make_bridge: BridgeFactory) -> Bridge:
    return await make_bridge(rules="", pools="")  # the embedded broker alone


async def test_expect_fails_when_fewer_messages_come(bridge: Bridge, clients: list[Client]) -> None:
    sub = Client(mqtt_port(bridge), "tc-sub")
    pub = Client(mqtt_port(bridge), "tc-pub")
    clients += [sub, pub]
    await sub.connected()
    await pub.connected()
    assert await sub.subscribe("tc/#", 1) == [1]
    await pub.publish("tc/1", b"one", qos=1)
    [message] = await sub.expect(1)
    assert (message.topic, message.payload) == ("tc/1", b"one")
    with pytest.raises(AssertionError, match="1 messages at 'tc-sub' \\(got 0\\)"):
        await sub.expect(1, timeout=1)  # nothing more was published


async def test_expect_nothing_fails_when_a_message_comes(bridge: Bridge, clients: list[Client]) -> None:
    sub = Client(mqtt_port(bridge), "tn-sub")
    clients.append(sub)
    await sub.connected()
    assert await sub.subscribe("tn/#", 1) == [1]
    await sub.publish("tn/1", b"to itself", qos=1)
    await wait_until(lambda: not sub.messages.empty(), what="the message back")
    with pytest.raises(AssertionError, match="received"):
        await sub.expect_nothing()


async def test_connected_fails_on_a_refused_connect(
    make_bridge: BridgeFactory, clients: list[Client], tmp_path: Path
) -> None:
    no_users = tmp_path / "passwd"
    no_users.write_text("")
    config = f"broker.auth.password_file = {no_users}\nbroker.allow_anonymous = off\n"
    closed = await make_bridge(rules="", pools="", extra_config=config)
    client = Client(mqtt_port(closed), "tr-anonymous", version=V5)  # no user name: refused
    clients.append(client)
    with pytest.raises(AssertionError, match="refused"):
        await client.connected()
    assert client.connack is not None and client.connack.reason == 0x87  # not authorized


async def test_until_returns_what_came_before_the_marker_and_several_filters_go_in_one_subscribe(
    bridge: Bridge, clients: list[Client]
) -> None:
    sub = Client(mqtt_port(bridge), "tu-sub", version=V5)
    pub = Client(mqtt_port(bridge), "tu-pub")
    clients += [sub, pub]
    await sub.connected()
    await pub.connected()
    assert await sub.subscribe([("tu/a", 0), ("tu/b", 1), ("tu/marker", 2)]) == [0, 1, 2]
    await pub.publish("tu/a", b"a", qos=1)
    await pub.publish("tu/b", b"b", qos=1)
    await pub.publish("tu/marker", b"end", qos=1)
    got = await sub.until("tu/marker", b"end")
    assert [(m.topic, m.payload, m.qos) for m in got] == [("tu/a", b"a", 0), ("tu/b", b"b", 1)]
