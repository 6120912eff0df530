"""Short full garbage collections at a fleet's size: what survived a slow one is frozen.

CPython's cyclic collector stops the whole process while it walks every container object of the
generation it collects. The oldest generation holds what the broker keeps for long: sessions,
subscriptions, topic tree nodes (about 6.5 tracked objects per subscription). At 1,000,000
subscriptions that is 6.5 million objects and a full collection pauses the event loop for
seconds (bench/gc_pauses.py; docs/benchmarks.md#garbage-collection-pauses), every client waiting.

`gc.freeze()` moves every object tracked now into a permanent generation that no collection
walks. Done once after start-up (`freeze_startup`: modules, rules, pools and the durable
sessions just restored), and again after any full collection that took `gc.freeze_after` or
longer (`SlowCollectionFreezer`): its survivors were just proven alive and are long-lived, so
the next full collection walks only what came after them. A full collection then stays near
`gc.freeze_after` however large the broker grows.

What it costs: a frozen object that becomes garbage inside a reference cycle is not freed (one
freed by its reference count, as nearly everything, still is). The broker's sessions,
subscriptions and tree nodes form no cycles when they go (the bench: 0 objects left after a
million subscriptions come and go), and neither do its connections
(tests/integration/test_gc_frozen_connections.py; asyncio's client transports do, which is why a
client in the broker's process once looked like a leak of the broker's). For whatever else
might, `gc.thaw_interval` (default 0: never) has `SlowCollectionFreezer.thaw` unfreeze
everything, collect once (the one long pause, logged with its length) and freeze what survived.
`gc.freeze_after = 0` turns the freezing off.

The youngest generation is collected every `gc.young_threshold` allocations (`set_young_threshold`)
rather than CPython's 700: messages in flight then rarely reach the older generations.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

log = logging.getLogger(__name__)


# How many allocations CPython lets pass between two full collections with its own thresholds
# (700, 10, 10): 700 x 11 x 11. `set_young_threshold` keeps that cadence for the full ones.
_FULL_EVERY = 700 * 11 * 11


def set_young_threshold(allocations: int) -> None:
    """Collect the youngest generation every `allocations` net allocations of tracked objects
    (`gc.young_threshold`), and the older ones as often as CPython's own thresholds would (every
    about 85,000 allocations a full collection: what `gc.freeze_after` keeps short). Under load
    CPython's 700 collects the youngest generation every few hundred messages, while those
    messages are still in flight: they survive, move up, and are walked again. With 10,000 most
    are gone by the next collection: the collector's time per message fell from about 2.3 to
    0.9 µs (docs/benchmarks.md#the-young-generations-threshold)."""
    older = max(1, round((_FULL_EVERY / allocations) ** 0.5) - 1)
    gc.set_threshold(allocations, older, older)


def freeze_startup() -> None:
    """Collect once, then freeze what start-up built (a durable restore included): no later full
    collection walks it."""
    gc.collect()
    gc.freeze()


class SlowCollectionFreezer:
    """After a full collection that took `slow` seconds or longer, freeze its survivors."""

    def __init__(self, slow: float) -> None:
        self.slow = slow
        self.freezes = 0  # how many times it froze (the log says when and how long the pause was)
        self._started = 0.0
        self._thawing = False  # the collection in `thaw` is its own: not one to freeze after

    def install(self) -> None:
        if self._observe not in gc.callbacks:
            gc.callbacks.append(self._observe)

    def uninstall(self) -> None:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        # Called by the collector itself, before and after each collection: nothing here may
        # raise or allocate much. gc.freeze() only moves the collector's lists: safe once it is done.
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        if info.get("generation") != 2 or took < self.slow or self._thawing:
            return
        gc.freeze()
        self.freezes += 1
        try:  # logged from the event loop's next turn: a collection may start inside a log write
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_soon(
            log.info,
            "a full garbage collection paused the process %.0f ms: its %d surviving objects are frozen "
            "(no later collection walks them; gc.freeze_after)",
            took * 1000,
            gc.get_freeze_count(),
        )

    def thaw(self) -> None:
        """Unfreeze everything, collect the cycles frozen objects formed since, freeze the
        survivors again: the one full-length pause, logged."""
        gc.unfreeze()
        self._thawing = True
        started = time.perf_counter()
        try:
            found = gc.collect()
        finally:
            self._thawing = False
        took = time.perf_counter() - started
        gc.freeze()
        log.info(
            "garbage collection over every object (gc.thaw_interval): %d unreachable found, %.0f ms; %d frozen again",
            found,
            took * 1000,
            gc.get_freeze_count(),
        )

    async def thaw_every(self, interval: float) -> None:
        """`thaw` every `interval` seconds, for the life of the process."""
        while True:
            await asyncio.sleep(interval)
            self.thaw()
