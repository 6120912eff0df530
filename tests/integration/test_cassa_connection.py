"""Cassandra pool connection settings against the real node: login, TLS (the node offers it beside plain
connections, with the private CA scripts/cassandra.sh made), a node down at start."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bridge.backend import PermanentError
from conformance.cassa_store import CassaStore
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client
from support.services import ROOT, start_cassandra, stop_cassandra

PORT = 9042
CA = ROOT / ".run" / f"cassandra-{PORT}" / "tls" / "ca.pem"
RULE = 'backend.cassa.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n'


@pytest.fixture
async def cassa() -> AsyncIterator[CassaStore]:
    await asyncio.to_thread(start_cassandra, PORT)
    store = CassaStore(PORT)
    await store.open()
    yield store
    await store.close()


def pool(extra: str = "") -> str:
    return CassaStore(PORT).pool_config() + extra


async def test_wrong_password_refuses_to_start(make_bridge: BridgeFactory, cassa: CassaStore) -> None:
    with pytest.raises(PermanentError, match="cannot log in to Cassandra"):
        await make_bridge(RULE, pools=pool().replace("password = hookbridge", "password = wrong"))


async def test_tls_with_verified_certificate(make_bridge: BridgeFactory, cassa: CassaStore) -> None:
    bridge = await make_bridge(
        RULE, pools=pool(f"backend.cassa.pool1.ssl = on\nbackend.cassa.pool1.ssl.cafile = {CA}\n")
    )
    client = await Client(mqtt_port(bridge), "tls-cassa").connected()
    await bridge.idle()
    assert (await cassa.client("tls-cassa") or {}).get("state") == 1
    # the node's own view of its connections: the bridge's are encrypted (the store's are not)
    rows = await cassa.rows("SELECT ssl_enabled, ssl_protocol FROM system_views.clients")
    assert any(enabled and protocol.startswith("TLS") for enabled, protocol in rows)
    await client.disconnect()


async def test_unknown_ca_is_refused_unless_verification_is_off(make_bridge: BridgeFactory, cassa: CassaStore) -> None:
    with pytest.raises(PermanentError, match="CERTIFICATE_VERIFY_FAILED"):
        await make_bridge(RULE, pools=pool("backend.cassa.pool1.ssl = on\n"))
    bridge = await make_bridge(RULE, pools=pool("backend.cassa.pool1.ssl = on\nbackend.cassa.pool1.ssl.verify = off\n"))
    client = await Client(mqtt_port(bridge), "tls-noverify").connected()
    await bridge.idle()
    assert (await cassa.client("tls-noverify") or {}).get("state") == 1
    await client.disconnect()


async def test_bridge_starts_while_cassandra_is_down_and_catches_up(make_bridge: BridgeFactory) -> None:
    """No node at start: the bridge starts, actions wait; then the schema and the rows arrive."""
    await asyncio.to_thread(stop_cassandra, PORT)
    try:
        bridge = await make_bridge(RULE, pools=pool("backend.cassa.pool1.retry_backoff_max = 300ms\n"))
        client = await Client(mqtt_port(bridge), "early").connected()
        await asyncio.sleep(1)
        assert not bridge.health()[0]
    finally:
        await asyncio.to_thread(start_cassandra, PORT)
    await asyncio.wait_for(bridge.idle(), 60)
    store = CassaStore(PORT)
    await store.connect()
    try:
        assert (await store.client("early") or {}).get("state") == 1
    finally:
        await store.close()
    await client.disconnect()
    assert bridge.health()[0]
