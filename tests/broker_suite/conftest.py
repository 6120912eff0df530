"""The `broker` fixture: every suite test runs against Mosquitto and against the embedded broker.

- `mosquitto`: Debian's Mosquitto 2.0, one process for the session (support/mosquitto.py: a
  config of its own, no persistence, anonymous clients on loopback), with the limits the 5.0
  tests exercise announced in CONNACK (maximum packet size, receive maximum, a server keep-alive
  cap).
- `embedded`: a bridge started by `make_bridge` with no rules and no pools, i.e. only the
  embedded broker, on a free loopback port; one per test.
- `embedded-durable`: the same with durable sessions on (`broker.durable_sessions`), so every
  rule of the protocol holds while sessions are written to the store too.

Tests share the Mosquitto process, so each one uses client ids and topics of its own (`unique`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_suite.brokers import Broker
from support.bridges import BridgeFactory, mqtt_port
from support.mosquitto import own_mosquitto
from support.mqtt import V5, Client

# What the suite's Mosquitto announces in CONNACK (5.0); the tests read the values from the
# CONNACK itself, these only configure Mosquitto.
MOSQUITTO_LIMITS = """\
max_packet_size 65536
max_inflight_messages 10
max_keepalive 60
"""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "mosquitto_deviates(reason): Mosquitto 2.0.11 breaks this rule of the specification (a strict xfail there)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "broker_name" in metafunc.fixturenames:
        mosquitto: Any = "mosquitto"
        deviation = metafunc.definition.get_closest_marker("mosquitto_deviates")
        if deviation is not None:
            # strict: the day a Mosquitto release conforms, the xfail turns into a failure to remove it
            mosquitto = pytest.param("mosquitto", marks=pytest.mark.xfail(strict=True, reason=deviation.args[0]))
        metafunc.parametrize("broker_name", [mosquitto, "embedded", "embedded-durable"])


@pytest.fixture(scope="session")
def mosquitto_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with own_mosquitto(tmp_path_factory.mktemp("mosquitto"), MOSQUITTO_LIMITS) as port:
        yield port


@pytest.fixture
def _server(request: pytest.FixtureRequest, broker_name: str) -> int | BridgeFactory:
    """Mosquitto's port, or the factory that starts an embedded broker (only what the parameter needs)."""
    if broker_name == "mosquitto":
        port: int = request.getfixturevalue("mosquitto_port")
        return port
    factory: BridgeFactory = request.getfixturevalue("make_bridge")
    return factory


@pytest.fixture
async def broker(broker_name: str, _server: int | BridgeFactory, tmp_path: Path) -> Broker:
    if isinstance(_server, int):
        return Broker(broker_name, _server)
    # As the suite's Mosquitto (max_keepalive 60): a server keep-alive cap the 5.0 tests read.
    config = "broker.server_keep_alive = 60\n"
    if broker_name == "embedded-durable":
        config += f"broker.durable_sessions = on\nbroker.durable_dir = {tmp_path / 'durable'}\n"
    bridge = await _server(rules="", pools="", extra_config=config)
    return Broker(broker_name, mqtt_port(bridge))


@pytest.fixture
async def clients(broker: Broker) -> AsyncIterator[Any]:
    """`clients(clientid, version=V5, ...)`: a client of the broker under test, stopped at teardown."""
    made: list[Client] = []

    def make(clientid: str = "", **kwargs: Any) -> Client:
        kwargs.setdefault("version", V5)
        client = broker.client(clientid, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()
