"""Pubsub offsets keyed `mqtt:acked:<clientid>:<filter>` (seed 003) when a `:` makes two keys one
(docs/backends/redis.md#client-ids-and-filters-with-a-): another client can neither move, read nor delete an offset it does not own.
Real MQTT clients, the embedded broker, real Redis, the shipped rules."""

from __future__ import annotations

import redis as redis_sync

from bridge.app import Bridge
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client, wait_until

VICTIM, VICTIM_FILTER = "alice", "pubsub/a:pubsub/b"
ATTACKER, ATTACKER_FILTER = "alice:pubsub/a", "pubsub/b"
SHARED_KEY = "mqtt:acked:alice:pubsub/a:pubsub/b"  # what both pairs name


async def written(bridge: Bridge, rule: str) -> None:
    """Wait until the rule has handled an event (acks and unsubscribes travel after the client moved on)."""
    await wait_until(lambda: bridge.metrics.rules[rule]["succeeded"] >= 1, what=f"{rule} to run")
    await bridge.idle()


async def test_a_colliding_client_cannot_move_or_drop_another_clients_offset(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    bridge = await make_bridge()
    port = mqtt_port(bridge)
    victim = await Client(port, VICTIM, clean=False).connected()
    await victim.subscribe(VICTIM_FILTER, qos=1)
    await bridge.idle()
    assert redis_db.get(SHARED_KEY) == b"0"
    await victim.disconnect()

    publisher = await Client(port, "pub").connected()
    for n in range(3):  # missed by the victim while it is away
        await publisher.publish(VICTIM_FILTER, f"missed {n}".encode(), qos=1)

    # the attack: subscribe, receive and ack a newer message, unsubscribe
    attacker = await Client(port, ATTACKER, clean=False).connected()
    await attacker.subscribe(ATTACKER_FILTER, qos=1)
    await publisher.publish(ATTACKER_FILTER, b"newer", qos=1)
    assert [m.payload for m in await attacker.expect(1)] == [b"newer"]
    await written(bridge, "redis.message.acked.2")  # the attacker's PUBACK went through the rule
    assert redis_db.get(SHARED_KEY) == b"0"  # not moved past the victim's missed messages
    await attacker.unsubscribe(ATTACKER_FILTER)
    await written(bridge, "redis.session.unsubscribed.1")
    assert redis_db.get(SHARED_KEY) == b"0"  # not dropped
    assert redis_db.hget("mqtt:acked_owner", SHARED_KEY) == VICTIM.encode()
    await attacker.disconnect()
    await publisher.disconnect()
    await bridge.stop()

    # a restarted bridge has no broker sessions: what the victim missed comes from its offset
    bridge = await make_bridge()
    victim = await Client(mqtt_port(bridge), VICTIM, clean=False).connected()
    await victim.subscribe(VICTIM_FILTER, qos=1)
    got = await victim.expect(3)
    assert [m.payload for m in got] == [f"missed {n}".encode() for n in range(3)]
    newest = redis_db.zrange(f"mqtt:msg:{VICTIM_FILTER}", -1, -1)[0]
    await wait_until(lambda: redis_db.get(SHARED_KEY) == newest, what="the owner's acks move its offset")
    await victim.disconnect()


async def test_client_ids_with_a_colon_keep_working_offsets(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    """A MAC address as client id: created, advanced and dropped by its owner, keys as in seed 003."""
    bridge = await make_bridge()
    port = mqtt_port(bridge)
    key = "mqtt:acked:aa:bb:cc:dd:ee:ff:pubsub/#"
    device = await Client(port, "aa:bb:cc:dd:ee:ff", clean=False).connected()
    await device.subscribe("pubsub/#", qos=1)
    await bridge.idle()
    assert redis_db.get(key) == b"0"
    publisher = await Client(port, "pub").connected()
    await publisher.publish("pubsub/t", b"live", qos=1)
    assert [m.payload for m in await device.expect(1)] == [b"live"]
    newest = redis_db.zrange("mqtt:msg:pubsub/t", -1, -1)[0]
    await wait_until(lambda: redis_db.get(key) == newest, what="the offset to advance")
    await device.unsubscribe("pubsub/#")
    await bridge.idle()
    assert redis_db.exists(key) == 0
    assert redis_db.hget("mqtt:acked_owner", key) is None
    # a plain pair never gets an owner entry
    plain = await Client(port, "plain", clean=False).connected()
    await plain.subscribe("pubsub/#", qos=1)
    await bridge.idle()
    assert redis_db.get("mqtt:acked:plain:pubsub/#") == newest
    assert redis_db.hkeys("mqtt:acked_owner") == []
    for client in (device, publisher, plain):
        await client.disconnect()
