"""The embedded MQTT 3.1.1 / 5.0 broker (`broker.mode = embedded`): the project's own core on
the codec in bridge/brokers/embedded/codec/."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.brokers.embedded.source import EmbeddedBroker

__all__ = ["EmbeddedBroker"]


def __getattr__(name: str) -> Any:
    """The source loads on first use, not when the mode's declaration (mode.py) is read."""
    if name in __all__:
        return getattr(importlib.import_module("bridge.brokers.embedded.source"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
