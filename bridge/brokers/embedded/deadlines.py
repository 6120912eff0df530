"""When each connection must be looked at again: its connect timeout, its keepalive.

Looking at every connection twice a second cost 8-17 ms a pass with 15,000 connections (the
event loop blocked that long, twice a second, whatever the traffic). Here a connection is put in
the slot of the time its deadline falls due and looked at then: a client that keeps sending is
looked at once per keepalive period (its deadline moved on by its own packets, read then), not
thirty times a minute.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Deadlines(Generic[T]):
    """Items by the slot (`tick` seconds wide) in which their deadline falls.

    `due(now)` hands out every item whose slot has passed, each once; an item that must be
    looked at again is watched again by the caller (its deadline may have moved meanwhile)."""

    __slots__ = ("_last", "_slots", "_tick")

    def __init__(self, tick: float, now: float) -> None:
        self._tick = tick
        self._slots: dict[int, list[T]] = {}
        self._last = int(now / tick)  # slots up to this one were handed out

    def watch(self, item: T, deadline: float) -> None:
        slot = max(int(deadline / self._tick) + 1, self._last + 1)  # never in a slot handed out
        self._slots.setdefault(slot, []).append(item)

    def due(self, now: float) -> list[T]:
        current = int(now / self._tick)
        found: list[T] = []
        if len(self._slots) < current - self._last:  # a long pause: fewer slots than steps
            for slot in [s for s in self._slots if s <= current]:
                found += self._slots.pop(slot)
        else:
            for slot in range(self._last + 1, current + 1):
                found += self._slots.pop(slot, ())
        self._last = max(self._last, current)
        return found

    def __len__(self) -> int:
        return sum(len(items) for items in self._slots.values())
