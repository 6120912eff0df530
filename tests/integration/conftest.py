"""Fixtures for integration tests against a real broker over TCP.

- `paho_clients`: `paho_clients(port, clientid, ...)` makes a `support.mqtt.Client`, stopped at teardown.
- `clients`: a list the test's `support.mqtt.Client`s go in (`support.bridges.connected` appends
  them), stopped at teardown.
- `raw_connect`: `support.raw.RawClient`s (a bare socket through the project's codec), aborted at teardown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from support.mqtt import Client
from support.process import BridgeProcess
from support.raw import RawClient


@pytest.fixture
async def paho_clients() -> AsyncIterator[Callable[..., Client]]:
    """A factory of `support.mqtt.Client`s (its arguments) that are all stopped at teardown."""
    made: list[Client] = []

    def make(port: int, client_id: str, **kwargs: Any) -> Client:
        client = Client(port, client_id, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


@pytest.fixture
async def raw_connect() -> AsyncIterator[Callable[..., Awaitable[tuple[RawClient, Any]]]]:
    """`await raw_connect(port, client_id, ...)`: a connected `RawClient` and its CONNACK, aborted at teardown."""
    made: list[RawClient] = []

    async def connect(port: int, client_id: str, **kwargs: Any) -> tuple[RawClient, Any]:
        client, connack = await RawClient.connect(port, client_id, **kwargs)
        made.append(client)
        return client, connack

    yield connect
    for client in made:
        client.abort()


@pytest.fixture
async def clients() -> AsyncIterator[list[Client]]:
    """The paho clients a test made (support.bridges.connected appends them), closed at teardown."""
    made: list[Client] = []
    yield made
    for client in made:
        await client.close()


@pytest.fixture
def bridges() -> Iterator[list[BridgeProcess]]:
    """Bridge processes a test starts (support.process), stopped at teardown whatever it did."""
    started: list[BridgeProcess] = []
    yield started
    for bridge in started:
        bridge.stop()
