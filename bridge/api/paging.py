"""Pages of a list that may hold a million items, read without holding the event loop.

A list is a `Source`: given the key of the last item looked at (None: from the start), it yields
(key, item) pairs in key order after it, item None for a key looked at that the request does not
want (a filter said no). `page` reads a source until it has `limit` items and one more (to know
whether a next page exists), and gives the loop a turn every SCAN_PER_TURN keys: each turn asks
the source again from the last key, so the broker may change the list between turns (a generator
over the live structures is never kept across a turn).

What a page costs: finding the cursor (a binary search in the sorted index, sortedkeys.py), then
one step per key read. A request whose filter skips most keys (`?connected=`, subscriptions
`?filter=` of a filter a fleet shares) reads more keys than it returns, a few milliseconds per
turn at most; `?user=` reads the user's own index (sessiontable.py) and a retained filter jumps
over the topics it rules out (filterseek.py).

The cursor is the key of the last item of a page; the next page is every key after it, so a walk
through the pages returns each item that stays in the list throughout exactly once, in order, and
never one twice, whatever is added or removed meanwhile (an item added behind the cursor is not
seen by this walk; one removed before its page is reached is not returned).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

K = TypeVar("K")
Source = Callable[[K | None], Iterator[tuple[K, Any]]]

SCAN_PER_TURN = 2000  # keys looked at in one loop turn: about a millisecond or two of work


async def page(source: Source[K], after: K | None, limit: int) -> tuple[list[Any], K | None]:
    """Up to `limit` items after the key `after`, and the key to ask from next (None: no more)."""
    found: list[tuple[K, Any]] = []
    position = after
    while True:
        ran_out = True
        for looked, (key, item) in enumerate(source(position), 1):
            position = key
            if item is not None:
                found.append((key, item))
                if len(found) > limit:
                    ran_out = False
                    break
            if looked >= SCAN_PER_TURN:
                ran_out = False
                break
        if ran_out or len(found) > limit:
            break
        await asyncio.sleep(0)  # the broker's turn; then on from `position`
    chosen = found[:limit]
    more = len(found) > limit
    return [item for _, item in chosen], (chosen[-1][0] if more else None)
