"""Wrong passwords flooding from one address do not hold up a good login from another
(docs/security.md#what-each-limit-bounds, auth/checks.py): users in a real Redis with bcrypt
hashes, 40 connections (bench/flooder.py, its own process) sending wrong passwords from
127.0.0.1, a good login from 127.0.0.2.

What is asserted is not a time (the 10 s bound only keeps a hang from hanging the suite): it is
how many of the flood's password checks ended while the good login waited. Before the fair
share every check went to one thread pool in arrival order and the good one waited behind the
whole queue (40 checks, and logins timed out after 10 s); now it waits for the checks already
running and goes next. And the flood's surplus is refused at once (login_busy) and logged.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
import uuid
from collections.abc import Iterator

import bcrypt
import pytest
import redis as redis_sync

from bridge.app import Bridge
from bridge.brokers.embedded import EmbeddedBroker
from bridge.brokers.embedded.access import Login, Verdict
from bridge.brokers.embedded.auth.checks import PER_ADDRESS, WORKERS
from bridge.brokers.embedded.codec import MQTT_3_1_1, Connack, Connect, Disconnect
from bridge.brokers.embedded.limits import Limits
from bridge.msgid import MsgIdGenerator
from support.bridges import BridgeFactory, mqtt_port
from support.mqtt import wait_until
from support.raw import RawClient
from support.sink import RecordingSink
from tests.integration.test_broker_fair_share import start_flooder, stop_flooder

HANG_GUARD = 10.0
LOGINS = 5
COST = 10  # bcrypt rounds: tens of milliseconds a check


@pytest.fixture
def users(redis_port: int) -> Iterator[tuple[redis_sync.Redis, str]]:
    """The test's own users in the shared test Redis (unique names, deleted after: the server is
    shared, so it is not flushed)."""
    client = redis_sync.Redis(port=redis_port, protocol=2)
    tag = uuid.uuid4().hex[:8]
    yield client, tag
    for key in client.keys(f"mqtt_user:*-{tag}"):
        client.delete(key)
    client.close()


def add_user(client: redis_sync.Redis, name: str, password: bytes) -> dict[str, str]:
    """The user's hash, stored; returned to be stored again (the test Redis is shared: another
    test's flush may remove it meanwhile)."""
    fields = {"password": bcrypt.hashpw(password, bcrypt.gensalt(COST)).decode()}
    client.hset(f"mqtt_user:{name}", mapping=fields)
    return fields


def bad_credentials(bridge: Bridge) -> int:
    return int(bridge.broker.refused["login_bad_credentials"])


async def good_login(port: int, user: str, password: bytes) -> int:
    """A CONNECT from 127.0.0.2 (another address than the flood's); its CONNACK code."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    sock.bind(("127.0.0.2", 0))
    await loop.sock_connect(sock, ("127.0.0.1", port))
    client = RawClient(sock, MQTT_3_1_1)
    try:
        await client.send(Connect(f"good-{uuid.uuid4().hex[:6]}", MQTT_3_1_1, username=user, password=password))
        answer = await client.recv(HANG_GUARD)
        assert isinstance(answer, Connack), answer
        if answer.reason_code == 0:
            await client.send(Disconnect())
        return answer.reason_code
    finally:
        client.abort()


async def test_a_wrong_password_flood_does_not_hold_up_a_good_login_from_elsewhere(
    users: tuple[redis_sync.Redis, str], make_bridge: BridgeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    client, tag = users
    add_user(client, f"flooder-{tag}", b"the-right-one")
    good = add_user(client, f"good-{tag}", b"s3cret")
    bridge = await make_bridge("", "broker.auth.backend = redis.pool1\nbroker.auth.password_hash = bcrypt\n")
    port = mqtt_port(bridge)
    flooder = start_flooder(port, "password", "read", "--connections", "40", "--username", f"flooder-{tag}")
    waited, took = [], []
    try:
        with caplog.at_level(logging.WARNING, logger="bridge.brokers.embedded.auth"):
            await wait_until(lambda: bad_credentials(bridge) >= 40, 60, "the flood's checks")
            for _ in range(LOGINS):
                client.hset(f"mqtt_user:good-{tag}", mapping=good)
                bridge.broker.gate.users.clear()  # read again: a cached "unknown user" would refuse it
                before, started = bad_credentials(bridge), time.monotonic()
                assert await good_login(port, f"good-{tag}", b"s3cret") == 0
                took.append(time.monotonic() - started)  # shown, not asserted: the machine decides
                waited.append(bad_credentials(bridge) - before)
            assert flooder.poll() is None, "the flooder stopped"
    finally:
        errors = stop_flooder(flooder)
    assert "Traceback" not in errors, errors
    print(f"flood checks ended while a good login waited: {waited}; logins took {[round(t * 1000) for t in took]} ms")
    # the checks running when it came, and those the other workers end while its own runs
    assert max(waited) <= 4 * WORKERS + 2, waited
    assert bridge.broker.refused["login_busy"] > 0
    busy = [r.getMessage() for r in caplog.records if "refused without checking" in r.getMessage()]
    assert busy, [r.getMessage() for r in caplog.records]
    assert re.search(rf"\d+ password checks from 127\.0\.0\.1 already waiting \(at most {PER_ADDRESS} per", busy[0])
    assert "the-right-one" not in caplog.text and "wrong" not in caplog.text  # no password in the log


class PendingGate:
    """A gate whose verdict never comes: a login held up (by hashing, by a slow database)."""

    def __init__(self) -> None:
        self.asked, self.release = asyncio.Event(), asyncio.Event()

    async def login(self, login: Login) -> Verdict:
        self.asked.set()
        await self.release.wait()  # set when the test ends
        return Verdict(False, "login_not_authorized")

    async def close(self) -> None:
        return None


async def test_a_login_that_is_never_decided_is_logged_as_such(caplog: pytest.LogCaptureFixture) -> None:
    """It was logged as "sent no CONNECT within 10 s", blaming a client that had sent it."""
    gate = PendingGate()
    broker = EmbeddedBroker(
        "127.0.0.1:0",
        node="fair@127.0.0.1",
        msgids=MsgIdGenerator("fair@127.0.0.1"),
        limits=Limits(connect_timeout=0.5),
        gate=gate,
    )
    await broker.start(RecordingSink())
    try:
        with caplog.at_level(logging.INFO, logger="bridge.brokers.embedded"):
            client = await RawClient.open(broker.port)
            await client.send(Connect("held", MQTT_3_1_1, username="u", password=b"p"))
            await asyncio.wait_for(gate.asked.wait(), HANG_GUARD)
            assert await client.until_closed(HANG_GUARD) == []
        lines = [r.getMessage() for r in caplog.records]
        assert any("its CONNECT was not answered within 0.5 s (the login" in line for line in lines), lines
        assert not any("sent no CONNECT" in line for line in lines), lines
        assert broker.refused["connect_timeout"] == 1
    finally:
        gate.release.set()
        await broker.stop()
