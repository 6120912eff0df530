"""The brokers the interop tests run against: the embedded broker as a user runs it (a bridge
process with no rules and no pools, `python -m bridge run`, one per test) and a Mosquitto of the
module's own (support/mosquitto.py), so that a failure can be told apart from a test that
expects too much."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.mosquitto import own_mosquitto
from support.process import BridgeProcess


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[int]:
    """The port of a fresh embedded broker."""
    bridge = BridgeProcess(tmp_path, pools="", rules="")
    try:
        yield bridge.start().mqtt_port
    finally:
        bridge.stop()


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of Mosquitto with its default settings (shared by the module's tests)."""
    with own_mosquitto(tmp_path_factory.mktemp("mosquitto")) as port:
        yield port
