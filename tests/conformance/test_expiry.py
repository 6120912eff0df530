"""MQTT 5 message expiry on every backend: a stored message past its expiry is never fetched, and a
retained one past it is not sent by a retain lookup.

The publisher is an MQTT 5 client (support.mqtt's) on the embedded broker: one message with a message
expiry interval of 2 s, one without (and retained ones, 1 s and none). The test waits until the store says the first has expired
(a condition, not a sleep), then a new subscriber's fetch must bring the second only; a restarted
bridge the same.
"""

from __future__ import annotations

import asyncio

from paho.mqtt.packettypes import PacketTypes

from conformance.stores import Store, rules_for
from support.bridges import BridgeFactory, eventually, mqtt_port
from support.mqtt import V5, Client
from support.mqtt_properties import props


async def _publish_v5(port: int, messages: list[tuple[str, bytes, int | None, bool]]) -> None:
    """Publish (topic, payload, expiry or None, retain) at QoS 1 as an MQTT 5 client; return once all are acked."""
    client = await Client(port, "pub5", version=V5).connected()
    try:
        acks = []
        for topic, payload, expiry, retain in messages:
            expiry_property = {} if expiry is None else {"MessageExpiryInterval": expiry}
            properties = props(PacketTypes.PUBLISH, **expiry_property)
            acks.append(client.send(topic, payload, 1, retain, properties))
        async with asyncio.timeout(10):
            await asyncio.gather(*acks)
    finally:
        await client.disconnect()


async def _fetched(port: int, clientid: str, topic_filter: str, expected: int) -> list[bytes]:
    reader = await Client(port, clientid, clean=False).connected()
    await reader.subscribe(topic_filter, qos=1)
    got = [m.payload for m in await reader.expect(expected)]
    await reader.expect_nothing()
    await reader.disconnect()
    return got


async def test_fetch_never_delivers_an_expired_message_also_after_a_restart(
    make_bridge: BridgeFactory, store: Store
) -> None:
    bridge = await make_bridge(rules_for(store.db), pools=store.pool_config())
    for reader in ("r1", "r2"):  # pubsub readers from before the messages: their fetch starts there
        client = await Client(mqtt_port(bridge), reader, clean=False).connected()
        await client.subscribe("pubsub/#", qos=1)
        await client.disconnect()
    await bridge.idle()
    # retained: one that expires in 1 s, one without; the waits below (2 s) cover the first
    messages: list[tuple[str, bytes, int | None, bool]] = [
        ("ret/short", b"r-short", 1, True),
        ("ret/kept", b"r-kept", None, True),
    ]
    messages += [("pubsub/exp", b"short-lived", 2, False), ("pubsub/exp", b"kept", None, False)]
    for queue in ("queue/a", "queue/b"):
        messages += [(queue, b"short job", 2, False), (queue, f"job {queue}".encode(), None, False)]
    await _publish_v5(mqtt_port(bridge), messages)
    await bridge.idle()
    assert len(await store.messages("pubsub/exp")) == 2  # both stored; the expiry is the store's to keep
    await bridge.stop()  # the embedded broker forgets its sessions: what the readers get is fetched

    # time passes: the store itself says when the short-lived ones have expired (no fixed sleep)
    await eventually(lambda: store.live_payloads("pubsub/exp"), lambda p: p == [b"kept"], timeout=30)
    await eventually(lambda: store.live_payloads("queue/b"), lambda p: p == [b"job queue/b"], timeout=30)

    bridge = await make_bridge(rules_for(store.db), pools=store.pool_config())
    assert await _fetched(mqtt_port(bridge), "r1", "pubsub/#", 1) == [b"kept"]
    assert await _fetched(mqtt_port(bridge), "w1", "queue/a", 1) == [b"job queue/a"]
    await bridge.stop()

    bridge = await make_bridge(rules_for(store.db), pools=store.pool_config())  # after a restart too
    assert await _fetched(mqtt_port(bridge), "r2", "pubsub/#", 1) == [b"kept"]
    assert await _fetched(mqtt_port(bridge), "w2", "queue/b", 1) == [b"job queue/b"]
    assert await _fetched(mqtt_port(bridge), "rr", "ret/#", 1) == [b"r-kept"]  # the retain lookup too
