"""Every conformance test runs once per installed backend, each on its real server."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator

import pytest

from bridge.conf import registry
from conformance.stores import Store


def store_type(db: str) -> type[Store]:
    """The suite's read-back for a backend: `conformance/<db>_store.py`'s STORE."""
    found: type[Store] = importlib.import_module(f"conformance.{db}_store").STORE
    return found


@pytest.fixture(scope="session")
def store_servers() -> dict[str, int]:
    """Ports of the servers started so far this session, by backend: each starts once."""
    return {}


@pytest.fixture(params=list(registry.backends()))
async def store(request: pytest.FixtureRequest, store_servers: dict[str, int]) -> AsyncIterator[Store]:
    kind = store_type(request.param)
    if request.param not in store_servers:
        store_servers[request.param] = kind.serve()
    chosen = kind(store_servers[request.param])
    await chosen.open()
    yield chosen
    await chosen.close()
