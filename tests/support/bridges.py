"""Helpers for tests that run a whole bridge."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bridge.app import Bridge

BridgeFactory = Callable[..., Awaitable[Bridge]]


def mqtt_port(bridge: Bridge) -> int:
    """The embedded broker's actual port (the tests listen on port 0)."""
    return bridge.broker.port  # type: ignore[attr-defined,no-any-return]
