"""PostgreSQL pool connection settings against real servers: TLS with a private CA, a server down at start."""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client
from support.services import postgres_dsn, start_postgres, stop_postgres
from support.tls import Certificates, make_certificates

PORT = 5441
RULE = 'backend.pgsql.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n'


@pytest.fixture(scope="module")
def tls_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Certificates]:
    certificates = make_certificates(tmp_path_factory.mktemp("pgcerts"))
    stop_postgres(PORT)  # started without TLS by an earlier run? restart with it
    os.environ["HOOKBRIDGE_PG_TLS_CERT"] = str(certificates.cert)
    os.environ["HOOKBRIDGE_PG_TLS_KEY"] = str(certificates.key)
    try:
        start_postgres(PORT)
    finally:
        del os.environ["HOOKBRIDGE_PG_TLS_CERT"], os.environ["HOOKBRIDGE_PG_TLS_KEY"]
    yield certificates
    stop_postgres(PORT)


def pool(ssl_lines: str) -> str:
    return (
        f"backend.pgsql.pool1.server = 127.0.0.1:{PORT}\nbackend.pgsql.pool1.username = hookbridge\n"
        "backend.pgsql.pool1.password = hookbridge\nbackend.pgsql.pool1.database = mqtt\n" + ssl_lines
    )


async def test_tls_with_verified_certificate(make_bridge: BridgeFactory, tls_postgres: Certificates) -> None:
    import asyncpg

    bridge = await make_bridge(
        RULE, pools=pool(f"backend.pgsql.pool1.ssl = on\nbackend.pgsql.pool1.ssl.cafile = {tls_postgres.ca}\n")
    )
    client = await Client(mqtt_port(bridge), "tls-pg").connected()
    await bridge.idle()
    context = ssl.create_default_context(cafile=str(tls_postgres.ca))
    conn = await asyncpg.connect(postgres_dsn(PORT), ssl=context)
    try:
        assert await conn.fetchval("SELECT state FROM mqtt_client WHERE clientid = 'tls-pg'") == 1
        # the bridge's own sessions are encrypted
        encrypted = await conn.fetchval(
            "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
            "WHERE a.usename = 'hookbridge' AND a.pid <> pg_backend_pid()"
        )
        assert encrypted is True
    finally:
        await conn.close()
    await client.disconnect()


async def test_unknown_ca_is_refused_unless_verification_is_off(
    make_bridge: BridgeFactory, tls_postgres: Certificates, tmp_path: Path
) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        await make_bridge(RULE, pools=pool("backend.pgsql.pool1.ssl = on\n"))
    bridge = await make_bridge(RULE, pools=pool("backend.pgsql.pool1.ssl = on\nbackend.pgsql.pool1.ssl.verify = off\n"))
    assert bridge.runners["pgsql.pool1"].healthy


async def test_bridge_starts_while_postgres_is_down_and_catches_up(make_bridge: BridgeFactory) -> None:
    """No schema, no server at start: actions wait, then the schema and the rows arrive."""
    import asyncio

    import asyncpg

    port = 5442
    await asyncio.to_thread(start_postgres, port)  # create the cluster once, then take it away
    conn = await asyncpg.connect(postgres_dsn(port))
    await conn.execute(
        "DROP TABLE IF EXISTS mqtt_client, mqtt_msg, mqtt_topic, mqtt_sub, mqtt_retain, mqtt_acked, mqtt_event_log"
    )
    await conn.close()
    await asyncio.to_thread(stop_postgres, port)
    pools = (
        f"backend.pgsql.pool1.server = 127.0.0.1:{port}\nbackend.pgsql.pool1.username = hookbridge\n"
        "backend.pgsql.pool1.password = hookbridge\nbackend.pgsql.pool1.retry_backoff_max = 300ms\n"
    )
    bridge = await make_bridge(RULE, pools=pools)
    client = await Client(mqtt_port(bridge), "early").connected()
    await asyncio.sleep(1)
    assert not bridge.health()[0]
    try:
        await asyncio.to_thread(start_postgres, port)
        await asyncio.wait_for(bridge.idle(), 30)
        conn = await asyncpg.connect(postgres_dsn(port))
        assert await conn.fetchval("SELECT state FROM mqtt_client WHERE clientid = 'early'") == 1
        await conn.close()
        assert bridge.health()[0]
    finally:
        await client.disconnect()
        await asyncio.to_thread(stop_postgres, port)
