"""`broker.mode = mqtt`: any MQTT 3.1.1/5 broker (Mosquitto first), through gmqtt."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.brokers.external.mqtt.source import MqttSource, Upstream

__all__ = ["MqttSource", "Upstream"]


def __getattr__(name: str) -> Any:
    """The source loads on first use, not when the mode's declaration (mode.py) is read."""
    if name in __all__:
        return getattr(importlib.import_module("bridge.brokers.external.mqtt.source"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
