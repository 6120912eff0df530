"""Fixtures for integration tests against a real broker over TCP.

- `paho_clients`: `support.paho.PahoClient`s, stopped at teardown.
- `raw_connect`: `support.raw.RawClient`s (a bare socket through the project's codec), aborted at teardown.
- `clients`: the `broker_suite.clients.Client`s a test made (`support.bridges.connected`), closed at teardown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from broker_suite.clients import Client as SuiteClient

from support.paho import PahoClient
from support.process import BridgeProcess
from support.raw import RawClient


@pytest.fixture
async def paho_clients() -> AsyncIterator[Callable[..., PahoClient]]:
    """A factory of `PahoClient`s that are all stopped at teardown."""
    made: list[PahoClient] = []

    def make(port: int, client_id: str, **kwargs: Any) -> PahoClient:
        client = PahoClient(port, client_id, **kwargs)
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
async def clients() -> AsyncIterator[list[SuiteClient]]:
    """The paho clients a test made (support.bridges.connected appends them), closed at teardown."""
    made: list[SuiteClient] = []
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
