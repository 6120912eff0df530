"""A durable session's queue read back lazily after a restart (durable/journal.py `load`), in
process: what is logged for a session not loaded yet but not committed (in the batch being
written, or in the next one) is in its queue once, in order, with what the store holds; a message
that does not match its filters is not; until its load the log is kept from its position."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, cast

from bridge.brokers.embedded.broker import Broker
from bridge.brokers.embedded.durable import DurableStore
from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.router import Message
from bridge.brokers.embedded.sessions import NEVER, SessionState, Subscription
from bridge.msgid import MsgIdGenerator

MSGIDS = MsgIdGenerator("test")


def broker(store: Path) -> Broker:
    return Broker(node="test", msgids=MSGIDS, sink=cast(Any, None), limits=Limits(), store=DurableStore(store))


def publish(b: Broker, topic: str, payload: bytes) -> None:
    b.router.route(Message(MSGIDS.next(), topic, payload, 1, False, "publisher"))


def queued(state: SessionState) -> list[bytes]:
    return [m.payload for m in state.outbox]


async def committed(b: Broker) -> None:
    assert b.journal is not None
    pending = b.journal.committed()
    if pending is not None:
        await pending


async def test_a_session_read_back_gets_the_store_and_the_uncommitted_log_once_in_order(tmp_path: Path) -> None:
    first = broker(tmp_path)
    state = first.restored_session("dev-1", NEVER, None, None, 4)
    first.router.subscribe(state, Subscription("a/+/x", 1, ""))
    first.router.subscribe(state, Subscription("a/1/#", 1, ""))  # overlapping: one copy
    state.touch(whole=True)
    publish(first, "a/1/x", b"m0")
    publish(first, "b/1/x", b"not-mine")
    publish(first, "a/2/x", b"m1")
    await committed(first)
    assert queued(state) == [b"m0", b"m1"]
    assert first.journal is not None
    first.journal.close()  # as at SIGTERM

    second = broker(tmp_path)
    journal = second.journal
    assert journal is not None
    journal.restore(second)
    again = second.states["dev-1"]
    assert again.unloaded is not None and not again.outbox and set(again.subscriptions) == {"a/+/x", "a/1/#"}
    head = journal.store.head
    publish(second, "a/3/x", b"m2")  # logged for it, not queued
    assert not again.outbox and journal.store.head == head + 1
    assert journal.trim_bound(time.monotonic())[0] == 0  # its position holds the log
    journal.flush()  # m2 now in the batch the writer thread is committing
    publish(second, "a/1/y", b"m3")  # in the next batch
    publish(second, "c/d", b"not-mine-either")
    second.loaded(again)
    assert again.unloaded is None
    assert queued(again) == [b"m0", b"m1", b"m2", b"m3"]
    assert [m.filters for m in again.outbox] == [("a/+/x", "a/1/#"), ("a/+/x",), ("a/+/x",), ("a/1/#",)]
    publish(second, "a/4/x", b"m4")  # loaded: queued at once
    assert queued(again) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    await asyncio.sleep(0.05)
    await committed(second)
    journal.close()

    third = broker(tmp_path)  # nothing acknowledged: the same queue after another restart
    assert third.journal is not None
    third.journal.restore(third)
    assert queued(third.loaded(third.states["dev-1"])) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    third.journal.close()
