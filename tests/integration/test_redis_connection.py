"""Redis pool settings against a real server: password, database number and TLS with a private CA."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import Client
from support.services import stop_redis
from support.tls import make_certificates

TLS_PORT = 6394
PASSWORD = "s3cret pass"


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A Redis answering only TLS (certificate from a CA made here) and requiring a password."""
    certs = tmp_path_factory.mktemp("certs")
    made = make_certificates(certs)
    ca, cert, key = made.ca, made.cert, made.key
    stop_redis(TLS_PORT)
    # port 0 turns plain TCP off; `scripts/redis.sh` checks readiness over TLS, so wait here instead
    subprocess.run(
        [
            "redis-server",
            "--port",
            "0",
            "--tls-port",
            str(TLS_PORT),
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "yes",
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(ca),
            "--tls-auth-clients",
            "no",
            "--requirepass",
            PASSWORD,
            "--save",
            "",
            "--dir",
            str(certs),
            "--pidfile",
            str(certs / "redis.pid"),
            "--logfile",
            str(certs / "redis.log"),
        ],
        check=True,
    )
    client = redis_sync.Redis(port=TLS_PORT, password=PASSWORD, ssl=True, ssl_ca_certs=str(ca))
    for _ in range(100):
        try:
            client.ping()
            break
        except redis_sync.ConnectionError:
            import time

            time.sleep(0.05)
    yield ca
    client.shutdown(nosave=True)


async def test_password_database_and_tls(make_bridge: BridgeFactory, tls_redis: Path) -> None:
    extra = (
        f"backend.redis.pool1.password = {PASSWORD}\n"
        "backend.redis.pool1.database = 3\n"
        "backend.redis.pool1.ssl = on\n"
        f"backend.redis.pool1.ssl.cafile = {tls_redis}\n"
    )
    rules = 'backend.redis.hook.message.publish.1 = {"topic": "#", "action": {"function": "on_message_publish"}}\n'
    # The TLS Redis is the module's: another test's keys may be in database 0 (a random-order
    # run put test_tls_without_verification_connects first, and dbsize() below saw its key).
    redis_sync.Redis(port=TLS_PORT, password=PASSWORD, ssl=True, ssl_ca_certs=str(tls_redis)).flushall()
    bridge = await make_bridge(rules, port=TLS_PORT, extra_config=extra)
    client = await Client(mqtt_port(bridge), "tls").connected()
    await client.publish("secure/t", b"over tls", qos=1)
    await client.disconnect()
    await bridge.idle()
    reader = redis_sync.Redis(port=TLS_PORT, password=PASSWORD, ssl=True, ssl_ca_certs=str(tls_redis), db=3)
    ids = reader.zrange("mqtt:msg:secure/t", 0, -1)
    assert [reader.hget(b"mqtt:msg:" + i, "payload") for i in ids] == [b"over tls"]
    assert redis_sync.Redis(port=TLS_PORT, password=PASSWORD, ssl=True, ssl_ca_certs=str(tls_redis)).dbsize() == 0
    reader.close()


async def test_wrong_password_keeps_the_pool_down_without_leaking_it(
    make_bridge: BridgeFactory, tls_redis: Path, caplog: pytest.LogCaptureFixture
) -> None:
    extra = (
        "backend.redis.pool1.password = not-it\n"
        "backend.redis.pool1.ssl = on\n"
        f"backend.redis.pool1.ssl.cafile = {tls_redis}\n"
    )
    with pytest.raises(redis_sync.AuthenticationError):
        await make_bridge(
            'backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n',
            port=TLS_PORT,
            extra_config=extra,
        )
    assert "not-it" not in caplog.text


async def test_tls_verification_refuses_an_unknown_ca(make_bridge: BridgeFactory, tls_redis: Path) -> None:
    extra = f"backend.redis.pool1.password = {PASSWORD}\nbackend.redis.pool1.ssl = on\n"
    with pytest.raises(redis_sync.ConnectionError, match="certificate verify failed"):
        await make_bridge(
            'backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n',
            port=TLS_PORT,
            extra_config=extra,
        )


async def test_tls_without_verification_connects(make_bridge: BridgeFactory, tls_redis: Path) -> None:
    extra = f"backend.redis.pool1.password = {PASSWORD}\nbackend.redis.pool1.ssl = on\nbackend.redis.pool1.ssl.verify = off\n"
    bridge = await make_bridge(
        'backend.redis.hook.client.connected.1 = {"action": {"function": "on_client_connected"}}\n',
        port=TLS_PORT,
        extra_config=extra,
    )
    client = await Client(mqtt_port(bridge), "unverified").connected()
    await bridge.idle()
    reader = redis_sync.Redis(port=TLS_PORT, password=PASSWORD, ssl=True, ssl_ca_certs=str(tls_redis))
    assert reader.hget("mqtt:client:unverified", "state") == b"1"
    await client.disconnect()
    reader.close()
