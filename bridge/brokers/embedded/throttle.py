"""At most one log line per interval for a problem that can repeat many times a second (a user
database down, an address's password checks full, the durable store refusing every commit):
the lines in between are counted, so the next one says how many it stands for."""

from __future__ import annotations

import time
from collections.abc import Callable


class Throttle:
    """At most one report per `interval` seconds; the ones in between are counted."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._at = -interval
        self._skipped = 0

    def due(self) -> int | None:
        """None: not yet (this one counted); else a report is due and stands for this many more."""
        now = self._clock()
        if now - self._at < self.interval:
            self._skipped += 1
            return None
        skipped, self._at, self._skipped = self._skipped, now, 0
        return skipped
