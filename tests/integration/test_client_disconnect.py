"""A test client's disconnect() returns once the broker has ended the session, so what a test
reads right after `disconnect(); bridge.idle()` is the client's offline state, with no wait of
its own (tests/support/mqtt.py, and bridge/brokers/embedded/source.py's idle())."""

from __future__ import annotations

import redis as redis_sync

from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import V5, V311, Client

ROUNDS = 30  # one round rarely shows the race; thirty in a row did on the old client


async def test_the_offline_state_is_stored_when_disconnect_and_idle_return(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    bridge = await make_bridge()  # the shipped rules/redis.conf: client.disconnected sets state 0
    for round_ in range(ROUNDS):
        clientid = f"leaving-{round_}"
        client = await Client(mqtt_port(bridge), clientid).connected()
        await client.publish("t/leaving", b"x", qos=0)  # nothing to wait on before the DISCONNECT
        await client.disconnect()
        await bridge.idle()
        assert redis_db.hget(f"mqtt:client:{clientid}", "state") == b"0", round_


async def test_the_client_waits_in_either_protocol_version(
    make_bridge: BridgeFactory, redis_db: redis_sync.Redis
) -> None:
    bridge = await make_bridge()
    for round_ in range(ROUNDS):
        clientid = f"leaving-suite-{round_}"
        client = Client(mqtt_port(bridge), clientid, version=V5 if round_ % 2 else V311)
        assert (await client.connect()).reason == 0
        await client.disconnect()
        await bridge.idle()
        assert redis_db.hget(f"mqtt:client:{clientid}", "state") == b"0", round_
