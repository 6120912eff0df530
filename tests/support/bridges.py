"""Helpers for tests that run a whole bridge."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from bridge.app import Bridge
from bridge.brokers.embedded.broker import Broker
from support.mqtt import Client

T = TypeVar("T")

BridgeFactory = Callable[..., Awaitable[Bridge]]


def mqtt_port(bridge: Bridge) -> int:
    """The embedded broker's actual port (the tests listen on port 0)."""
    return bridge.broker.port  # type: ignore[attr-defined,no-any-return]


async def eventually(read: Callable[[], Awaitable[T]], check: Callable[[T], bool], timeout: float = 10.0) -> T:
    """Poll an async read until `check` holds (acks and DISCONNECTs travel after the client moved on)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await read()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s; last value {value!r}")
        await asyncio.sleep(0.02)


def core(bridge: Bridge) -> Broker:
    """The running embedded broker of `bridge` (its sessions, router): what the API reads."""
    broker = bridge.broker.core  # type: ignore[attr-defined]
    assert isinstance(broker, Broker)
    return broker


async def connected(
    bridge: Bridge, made: list[Client], clientid: str, *, user: str | None = None, **kwargs: Any
) -> Client:
    """A paho client of `bridge`'s embedded broker whose CONNECT was accepted; `made` (the
    `clients` fixture) stops it at teardown. `kwargs`: the client's
    (version, clean, manual_ack, ...); `user`: its user name."""
    client = Client(mqtt_port(bridge), clientid, username=user or None, **kwargs)
    made.append(client)
    return await client.connected()
