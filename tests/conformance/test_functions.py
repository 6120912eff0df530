"""Every function (docs/rules.md#function-the-built-in-function-set), through the embedded broker, against every backend."""

from __future__ import annotations

from conformance.stores import START, Store, rules_for
from support.bridges import BridgeFactory, eventually, mqtt_port
from support.mqtt import Client

NODE = "test@127.0.0.1"


async def test_online_status(make_bridge: BridgeFactory, store: Store) -> None:
    bridge = await make_bridge(rules_for(store.db), pools=store.pool_config())
    client = await Client(mqtt_port(bridge), "sub_client", clean=False).connected()
    await bridge.idle()
    assert await store.client("sub_client") == {"state": 1, "online": True, "offline": False, "node": NODE}
    await client.disconnect()
    await bridge.idle()
    assert await store.client("sub_client") == {"state": 0, "online": True, "offline": True, "node": NODE}


async def test_proxy_subscription(make_bridge: BridgeFactory, store: Store) -> None:
    await store.add_subscription("dev", "dev/downlink", 1)
    bridge = await make_bridge(rules_for(store.db), pools=store.pool_config())
    device = await Client(mqtt_port(bridge), "dev").connected()
    await bridge.idle()
    app = await Client(mqtt_port(bridge), "app").connected()
    await app.publish("dev/downlink", b"reboot", qos=1)
    assert [(m.topic, m.payload) for m in await device.expect(1)] == [("dev/downlink", b"reboot")]
    for client in (device, app):
        await client.disconnect()


async def test_store_publish_qos_and_retain(make_bridge: BridgeFactory, store: Store) -> None:
    bridge = await make_bridge(rules_for(store.db), pools=store.pool_config())
    client = await Client(mqtt_port(bridge), "pub").connected()
    await client.publish("up/t", b"one", qos=1)
    await client.publish("up/t", b"zero", qos=0)
    await client.publish("up/t", b"two", qos=2)
    await client.publish("lamp/1", b"on", qos=1, retain=True)
    await client.disconnect()
    await bridge.idle()
    stored = await store.messages("up/t")
    assert [(m.payload, m.qos, m.sender, m.retain) for m in stored] == [
        (b"one", 1, "pub", False),
        (b"two", 2, "pub", False),
    ]
    assert [m.msgid for m in stored] == sorted(m.msgid for m in stored)
    lamp = await store.messages("lamp/1")
    assert await store.retained("lamp/1") == lamp[0].msgid

    client = await Client(mqtt_port(bridge), "pub").connected()
    await client.publish("lamp/1", b"off", qos=1, retain=True)
    await bridge.idle()
    assert await store.retained("lamp/1") == (await store.messages("lamp/1"))[-1].msgid
    await client.publish("lamp/1", b"", qos=1, retain=True)
    await bridge.idle()
    assert await store.retained("lamp/1") is None
    await client.disconnect()


async def test_queue_and_pubsub_offline_delivery_after_restart(make_bridge: BridgeFactory, store: Store) -> None:
    bridge = await make_bridge(rules_for(store.db), pools=store.pool_config())
    port = mqtt_port(bridge)
    reader = await Client(port, "p1", clean=False).connected()
    await reader.subscribe("pubsub/#", qos=1)
    await bridge.idle()
    assert await store.offset("p1", "pubsub/#") == START
    publisher = await Client(port, "pub").connected()
    await publisher.publish("pubsub/a", b"live", qos=1)
    assert [m.payload for m in await reader.expect(1)] == [b"live"]
    await bridge.idle()
    live_id = (await store.messages("pubsub/a"))[0].msgid
    await eventually(lambda: store.offset("p1", "pubsub/#"), lambda o: o == live_id)
    await reader.disconnect()
    for n in range(3):
        await publisher.publish("pubsub/a", f"missed {n}".encode(), qos=1)
        await publisher.publish("queue/jobs", f"job {n}".encode(), qos=1)
    await publisher.disconnect()
    await bridge.stop()  # the embedded broker forgets every session

    bridge = await make_bridge(rules_for(store.db), pools=store.pool_config())
    port = mqtt_port(bridge)
    reader = await Client(port, "p1", clean=False).connected()
    await reader.subscribe("pubsub/#", qos=1)
    assert [m.payload for m in await reader.expect(3)] == [b"missed 0", b"missed 1", b"missed 2"]
    worker = await Client(port, "w1", clean=False).connected()
    await worker.subscribe("queue/#", qos=1)
    assert [m.payload for m in await worker.expect(3)] == [b"job 0", b"job 1", b"job 2"]
    newest = (await store.messages("pubsub/a"))[-1].msgid
    await eventually(lambda: store.offset("p1", "pubsub/#"), lambda o: o == newest)
    await eventually(lambda: store.messages("queue/jobs"), lambda m: m == [])  # queue acks delete
    await reader.unsubscribe("pubsub/#")
    await eventually(lambda: store.offset("p1", "pubsub/#"), lambda o: o is None)
    await reader.expect_nothing()
    for client in (reader, worker):
        await client.disconnect()


async def test_retain_lookup_after_restart(make_bridge: BridgeFactory, store: Store) -> None:
    bridge = await make_bridge(rules_for(store.db), pools=store.pool_config())
    publisher = await Client(mqtt_port(bridge), "pub").connected()
    await publisher.publish("status/a", b"A", qos=1, retain=True)
    await publisher.publish("status/b/c", b"C", qos=0, retain=True)
    await publisher.disconnect()  # returns once the broker has read up to it (the QoS 0 publish too)
    await bridge.idle()
    stored = await store.client("pub")
    assert stored is not None and stored["state"] == 0
    await bridge.stop()
    bridge = await make_bridge(rules_for(store.db), pools=store.pool_config())
    viewer = await Client(mqtt_port(bridge), "viewer").connected()
    await viewer.subscribe("status/#", qos=1)
    got = sorted(await viewer.expect(2), key=lambda m: m.topic)
    assert [(m.topic, m.payload, m.qos, m.retain) for m in got] == [
        ("status/a", b"A", 1, True),
        ("status/b/c", b"C", 0, True),
    ]
    await viewer.expect_nothing()
    await viewer.disconnect()
