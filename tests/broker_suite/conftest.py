"""The `broker` fixture: every suite test runs against Mosquitto and against the embedded broker.

- `mosquitto`: Debian's Mosquitto 2.0 (installed by scripts/mosquitto.sh if missing), one process
  for the session on a free loopback port, with a config of its own rather than the mqtt-mode one
  scripts/mosquitto.sh writes: no persistence (no session or retained message survives into a
  later run), anonymous clients on loopback, and the limits the 5.0 tests exercise announced in
  CONNACK (maximum packet size, receive maximum, a server keep-alive cap).
- `embedded`: a bridge started by `make_bridge` with no rules and no pools, i.e. only the
  embedded broker, on a free loopback port; one per test.

Tests share the Mosquitto process, so each one uses client ids and topics of its own (`unique`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_suite.clients import V5, Broker, Client
from support.bridges import BridgeFactory, mqtt_port
from support.services import ROOT

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
        metafunc.parametrize("broker_name", [mosquitto, "embedded"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mosquitto exited with {process.returncode}: {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"mosquitto did not listen on {port}: {log.read_text()}")


@pytest.fixture(scope="session")
def mosquitto_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    if shutil.which("mosquitto") is None:
        # The project's script installs the Debian package (and starts its mqtt-mode broker).
        subprocess.run(["bash", str(ROOT / "scripts" / "mosquitto.sh"), "1885"], check=True)
    folder = tmp_path_factory.mktemp("mosquitto")
    port = _free_port()
    conf = folder / "mosquitto.conf"
    log = folder / "mosquitto.log"
    lines = f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n{MOSQUITTO_LIMITS}"
    lines += f"log_dest file {log}\nlog_type all\n"
    if os.geteuid() == 0:
        lines += "user root\n"  # as root it would switch to `mosquitto`, who cannot write the log here
    conf.write_text(lines)
    process = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, process, log)
        yield port
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def _server(request: pytest.FixtureRequest, broker_name: str) -> int | BridgeFactory:
    """Mosquitto's port, or the factory that starts an embedded broker (only what the parameter needs)."""
    if broker_name == "mosquitto":
        port: int = request.getfixturevalue("mosquitto_port")
        return port
    factory: BridgeFactory = request.getfixturevalue("make_bridge")
    return factory


@pytest.fixture
async def broker(broker_name: str, _server: int | BridgeFactory) -> Broker:
    if isinstance(_server, int):
        return Broker(broker_name, _server)
    bridge = await _server(rules="", pools="")
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
