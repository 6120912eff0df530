"""The durable store counts as unwritable (/healthz 503, hookbridge_broker_durable_store_up 0)
from a failed commit until a commit works and journal.FAILURE_HOLD has passed since the last
failure. A nearly full disk takes small commits (a session's state) and refuses big ones (the
messages): readiness must not flip back to ready between them. The real full disk is in
tests/integration/test_durable_health.py; here one commit is refused to time the hold."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any, cast

import pytest

from bridge.brokers.embedded.broker import Broker
from bridge.brokers.embedded.durable import DurableStore
from bridge.brokers.embedded.durable.health import store_health
from bridge.brokers.embedded.durable.journal import FAILURE_HOLD
from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.sessions import NEVER
from bridge.msgid import MsgIdGenerator


async def commit(broker: Broker) -> None:
    assert broker.journal is not None
    pending = broker.journal.committed()
    assert pending is not None, "nothing to commit"
    await pending


async def test_a_failed_commit_holds_the_store_down_past_the_next_one_that_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = Broker(
        node="test", msgids=MsgIdGenerator("test"), sink=cast(Any, None), limits=Limits(), store=DurableStore(tmp_path)
    )
    journal = broker.journal
    assert journal is not None
    state = broker.restored_session("dev-1", NEVER, None, None, 4)
    assert journal.failing() == "" and store_health(journal, 0)["up"]

    write = journal.store.write

    def full(batch: Any) -> Any:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(journal.store, "write", full)
    state.touch(whole=True)
    with pytest.raises(asyncio.CancelledError):  # its waiters are cancelled: nothing acknowledged
        await commit(broker)
    assert journal.commit_failures == 1
    assert journal.failing() == "database or disk is full"
    health = store_health(journal, 0)
    assert not health["up"] and not health["writable"] and health["error"] == "database or disk is full"

    monkeypatch.setattr(journal.store, "write", write)
    await commit(broker)  # the session's rows, written again: this one works
    still = journal.failing()
    assert still.startswith("database or disk is full (") and "30 s after the last failed commit" in still
    assert not store_health(journal, 0)["writable"]
    assert journal.failing(now=time.monotonic() + FAILURE_HOLD) == ""
    journal.close()
