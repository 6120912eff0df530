"""The spool's byte bound, shared by every pool of the bridge
(docs/operations.md#the-spool-what-keeps-actions-across-an-outage-and-a-restart).

Only the lane spools (segments.py) change `used`: every byte a segment file gains or loses is
charged or released here at that moment, so `used` is the size of the open pools' spool files.
"""

from __future__ import annotations

import asyncio


class Budget:
    def __init__(self, max_bytes: int, overflow: str) -> None:
        self.max_bytes = max_bytes
        self.overflow = overflow  # "block" | "drop_oldest"
        self.used = 0
        self.freed = asyncio.Event()  # set whenever bytes are released: a blocked writer tries again

    def fits(self, size: int) -> bool:
        return self.used + size <= self.max_bytes

    def charge(self, size: int) -> None:
        self.used += size

    def release(self, size: int) -> None:
        if size:
            self.used -= size
            self.freed.set()

    @property
    def near_full(self) -> bool:
        return self.used >= 0.9 * self.max_bytes
