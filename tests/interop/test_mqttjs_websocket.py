"""MQTT.js over WebSocket (ws://…/mqtt, subprotocol `mqtt`, as browsers connect) against the
embedded broker, MQTT 3.1.1 and 5.0: the same round trip and the same judging as over TCP
(test_mqttjs.py), with js/roundtrip.mjs pointed at the broker's `broker.listener.ws` by
MQTTJS_URL. The broker is a bridge process as a user runs it, with a WebSocket listener."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from interop import test_mqttjs as tcp  # its tests are called, not collected again here

from support.process import BridgeProcess, free_port

roundtrip = tcp.roundtrip  # the fixture that installs MQTT.js


@pytest.fixture
def websocket_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    ws_port = free_port()
    bridge = BridgeProcess(tmp_path, pools="", rules="", extra=f"broker.listener.ws = 127.0.0.1:{ws_port}\n")
    try:
        bridge.start()
        monkeypatch.setenv("MQTTJS_URL", f"ws://127.0.0.1:{ws_port}/mqtt")
        yield free_port()  # a port nothing listens on: the run goes over WebSocket or fails
    finally:
        bridge.stop()


def test_mqtt_3_1_1_over_websocket(roundtrip: Path, websocket_broker: int) -> None:
    tcp.test_mqtt_3_1_1_round_trip(roundtrip, websocket_broker)


def test_mqtt_5_over_websocket(roundtrip: Path, websocket_broker: int) -> None:
    tcp.test_mqtt_5_round_trip(roundtrip, websocket_broker)
