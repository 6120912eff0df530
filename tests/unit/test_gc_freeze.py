"""Short full garbage collections (bridge/ops/gcfreeze.py): what `hookbridge run` freezes and when.

The mechanism only, never a time: after start-up (a durable restore included) the restored
sessions and subscriptions are frozen, so no later full collection walks them; a full
collection that took `gc.freeze_after` or longer freezes its survivors; a young one, a fast one,
or `gc.freeze_after = 0` freezes nothing. The pauses themselves are measured by
bench/gc_pauses.py (docs/benchmarks.md#garbage-collection-pauses).
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from bridge import cli
from bridge.brokers.embedded.broker import Broker
from bridge.brokers.embedded.durable import DurableStore
from bridge.brokers.embedded.limits import Limits
from bridge.brokers.embedded.sessions import NEVER, Subscription
from bridge.conf.config import load_config
from bridge.conf.errors import ConfErrors
from bridge.msgid import MsgIdGenerator
from bridge.ops.gcfreeze import SlowCollectionFreezer, set_young_threshold

MSGIDS = MsgIdGenerator("test")


class Kept:
    """A container object the collector tracks, kept alive by the test."""

    def __init__(self) -> None:
        self.items: list[Any] = []


def frozen(obj: object) -> bool:
    """Tracked by the collector but in none of its generations: in the permanent one."""
    assert gc.is_tracked(obj)
    return not any(each is obj for each in gc.get_objects())


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Each test starts and ends with nothing frozen and no freezer installed."""
    gc.unfreeze()
    callbacks = list(gc.callbacks)
    yield
    gc.callbacks[:] = callbacks
    gc.unfreeze()


def test_a_slow_full_collection_freezes_its_survivors() -> None:
    freezer = SlowCollectionFreezer(0.0)  # every full collection counts as slow
    freezer.install()
    freezer.install()  # once, however often installed
    kept = Kept()
    assert not frozen(kept)
    gc.collect(0)
    gc.collect(1)  # young collections: nothing frozen
    assert not frozen(kept) and freezer.freezes == 0 and gc.get_freeze_count() == 0
    gc.collect(2)
    assert frozen(kept) and freezer.freezes == 1
    newer = Kept()
    assert not frozen(newer)  # made after: walked by the next collections until one is slow again
    freezer.uninstall()
    gc.collect(2)
    assert not frozen(newer) and freezer.freezes == 1


def test_a_fast_full_collection_freezes_nothing() -> None:
    freezer = SlowCollectionFreezer(3600.0)
    freezer.install()
    kept = Kept()
    gc.collect(2)
    assert not frozen(kept) and freezer.freezes == 0 and gc.get_freeze_count() == 0


async def test_the_sessions_a_durable_restore_reads_back_are_frozen_with_start_up(tmp_path: Path) -> None:
    first = Broker(node="test", msgids=MSGIDS, sink=cast(Any, None), limits=Limits(), store=DurableStore(tmp_path))
    for n in range(50):
        state = first.restored_session(f"dev-{n}", NEVER, None, None, 4)
        first.router.subscribe(state, Subscription(f"dev/{n}/cmd/#", 1, ""))
        state.touch(whole=True)
    assert first.journal is not None
    pending = first.journal.committed()
    if pending is not None:
        await pending
    first.journal.close()

    second = Broker(node="test", msgids=MSGIDS, sink=cast(Any, None), limits=Limits(), store=DurableStore(tmp_path))
    assert second.journal is not None
    second.journal.restore(second)  # as EmbeddedBroker.start does, within Bridge.start
    restored = second.states["dev-7"]
    assert not frozen(restored)
    freezer = cli._freeze_startup_objects(0.05)  # what `hookbridge run` calls once the bridge started
    assert frozen(restored) and frozen(restored.subscriptions["dev/7/cmd/#"])
    assert frozen(second.states) and gc.get_freeze_count() > 0
    assert freezer is not None and freezer._observe in gc.callbacks  # later slow collections freeze too
    await asyncio.sleep(0)
    second.journal.close()


def test_gc_freeze_after_0_freezes_start_up_only() -> None:
    assert cli._freeze_startup_objects(0) is None
    assert not any(isinstance(getattr(each, "__self__", None), SlowCollectionFreezer) for each in gc.callbacks)
    kept = Kept()
    gc.collect(2)
    assert not frozen(kept)


def test_thaw_frees_the_cycles_frozen_objects_formed_and_freezes_the_rest_again() -> None:
    """What freezing costs (a frozen object in a reference cycle is not freed when it goes, as an
    asyncio transport of a closed connection) is given back by `thaw` (gc.thaw_interval)."""
    freezer = SlowCollectionFreezer(0.0)
    freezer.install()
    gone, stays = Kept(), Kept()
    gone.items.append(gone)  # a cycle, as a transport and its own read callback
    watch = weakref.ref(gone)
    gc.collect()
    assert freezer.freezes == 1 and frozen(gone)
    del gone
    gc.collect(2)
    assert watch() is not None  # frozen: the collector does not look at it
    freezer.thaw()
    assert watch() is None and frozen(stays)
    assert freezer.freezes == 2  # after the two full collections above; the thaw's own is not one to freeze after


def test_the_young_generations_threshold_is_set_and_full_collections_come_as_often_as_before() -> None:
    before = gc.get_threshold()
    try:
        set_young_threshold(700)
        assert gc.get_threshold() == (700, 10, 10)  # CPython's own
        set_young_threshold(10_000)  # the default: a full collection as often as with CPython's own
        assert gc.get_threshold() == (10_000, 2, 2)
    finally:
        gc.set_threshold(*before)


def test_check_rejects_a_young_threshold_run_would_not_take(tmp_path: Path) -> None:
    (tmp_path / "bridge.conf").write_text("gc.young_threshold = 10000\n")
    assert load_config(tmp_path / "bridge.conf")["gc.young_threshold"] == 10_000
    (tmp_path / "bridge.conf").write_text("log.level = info\ngc.young_threshold = 0\n")
    with pytest.raises(ConfErrors) as refused:
        load_config(tmp_path / "bridge.conf")
    assert "bridge.conf:2:" in str(refused.value) and "gc.young_threshold" in str(refused.value)
