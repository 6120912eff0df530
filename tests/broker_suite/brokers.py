"""`Broker`: the broker a suite test runs against (the `broker` fixture, conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from support.mqtt import Client


@dataclass(frozen=True)
class Broker:
    """A broker under test: its name (the test parameter) and its loopback port."""

    name: str
    port: int

    def client(self, clientid: str = "", **kwargs: Any) -> Client:
        """An unconnected client; prefer the `clients` fixture, which also stops it."""
        return Client(self.port, clientid, **kwargs)
