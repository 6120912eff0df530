"""`broker.mode = emqx`: an EMQX 5 node's system messages, rule-engine events and REST API."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.brokers.external.emqx.source import EmqxSource

__all__ = ["EmqxSource"]


def __getattr__(name: str) -> Any:
    """The source loads on first use, not when the mode's declaration (mode.py) is read."""
    if name in __all__:
        return getattr(importlib.import_module("bridge.brokers.external.emqx.source"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
