"""After a restart, what a returning fleet was owed is released a share per trim
(durable/journal.py `_RELEASE_PER_TRIM`): the `routes` rows of sessions that reconnected and
acknowledged their queues go over several commits rather than in one long one that the storm's
acknowledgements would wait behind, and every one of them goes in the end. In process (the
journal's constants made small), with real clients over TCP and the store's SQLite file read."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bridge.brokers.embedded import EmbeddedBroker
from bridge.brokers.embedded.codec import Connack, Puback, Publish, Suback
from bridge.brokers.embedded.durable import journal as journal_module
from bridge.brokers.embedded.durable.store import FILENAME
from bridge.msgid import MsgIdGenerator
from support.mqtt import wait_until
from support.raw import RawClient
from support.sink import RecordingSink

NODE = "test@127.0.0.1"
DEVICES = 10
PER_TRIM = 3


def routed_clients(store: Path) -> set[str]:
    """The sessions that still have `routes` rows, read from the file."""
    db = sqlite3.connect(store / FILENAME)
    try:
        return {row[0] for row in db.execute("SELECT DISTINCT clientid FROM routes")}
    finally:
        db.close()


async def started(store: Path) -> EmbeddedBroker:
    broker = EmbeddedBroker("127.0.0.1:0", node=NODE, msgids=MsgIdGenerator(NODE), durable_dir=str(store))
    await broker.start(RecordingSink())
    return broker


async def test_a_returning_fleet_is_released_a_share_per_trim_and_wholly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "_TRIM_INTERVAL", 0.05)
    monkeypatch.setattr(journal_module, "_RELEASE_PER_TRIM", PER_TRIM)
    store = tmp_path / "store"
    devices = [f"dev-{n}" for n in range(DEVICES)]

    first = await started(store)
    for device in devices:  # a persistent session each, subscribed, then offline
        client, connack = await RawClient.connect(first.port, device, clean_session=False)
        assert isinstance(connack, Connack) and connack.reason_code == 0
        assert isinstance(await client.subscribe(1, (f"cmd/{device}", 1)), Suback)
        client.abort()
    publisher, _ = await RawClient.connect(first.port, "publisher")
    for n, device in enumerate(devices, start=1):
        await publisher.send(Publish(f"cmd/{device}", f"for {device}".encode(), qos=1, packet_id=n))
        assert await publisher.recv() == Puback(n)
    publisher.abort()
    await first.stop()

    second = await started(store)
    journal = second._broker.journal if second._broker is not None else None
    assert journal is not None
    released: list[int] = []  # sessions released by each commit that released any
    write = journal.store.write

    def recording(batch: Any) -> Any:
        if batch.release:
            released.append(len(batch.release))
        return write(batch)

    monkeypatch.setattr(journal.store, "write", recording)
    # Restored and not loaded: what each is owed is held by its `routes` rows.
    await wait_until(lambda: routed_clients(store) == set(devices), 30, "every session's queue in routes")
    # The log moves on while they are away: a trim past their entries keeps their rows (owing).
    publisher, _ = await RawClient.connect(second.port, "publisher")
    await publisher.send(Publish("elsewhere", b"x", qos=1, packet_id=1))
    assert await publisher.recv() == Puback(1)
    publisher.abort()
    await wait_until(lambda: set(journal._kept) == set(devices), 30, "a trim that kept the fleet's rows")

    async def come_back(device: str) -> RawClient:
        """Reconnect, take the queue, acknowledge it."""
        client, connack = await RawClient.connect(second.port, device, clean_session=False)
        assert isinstance(connack, Connack) and connack.session_present
        message = await client.recv()
        assert isinstance(message, Publish) and message.payload == f"for {device}".encode()
        await client.send(Puback(message.packet_id))
        return client

    # The whole fleet at once, so that every session is due at the same trim.
    monkeypatch.setattr(journal_module, "_TRIM_INTERVAL", 3600)  # no trim until they are all back
    clients = await asyncio.gather(*(come_back(device) for device in devices))
    await wait_until(lambda: journal.committed() is None, 30, "the acknowledgements committed")
    monkeypatch.setattr(journal_module, "_TRIM_INTERVAL", 0.05)
    if journal._trim_timer is not None:  # the one set for an hour
        journal._trim_timer.cancel()
        journal._trim_timer = None
    journal._last_trim = 0.0
    journal.flush()

    await wait_until(lambda: not routed_clients(store), 30, "every session's rows released")
    assert sum(released) >= DEVICES
    assert max(released) <= PER_TRIM, released  # a share per commit, never the whole fleet at once
    assert len(released) >= -(-DEVICES // PER_TRIM)
    for client in clients:
        client.abort()
    await second.stop()
