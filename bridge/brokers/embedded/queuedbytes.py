"""The broker-wide bound on the bytes queued in every session's outbox (broker.max_queued_bytes).

The sessions (sessions.SessionState, seen here as a `Queue`) add and subtract their queued bytes to its `total` as they
queue, send, drop and end; past the bound it picks the largest queue and has it drop its oldest
message (SessionState.drop_oldest), counted and logged as any other drop.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Mapping
from typing import Protocol

log = logging.getLogger("bridge.brokers.embedded")

# At most one "over max_queued_bytes" warning for the whole broker per this many seconds.
_DROP_LOG_INTERVAL = 5.0


class Queue(Protocol):
    """A session's queue as the bound sees it (sessions.SessionState)."""

    heap_mark: int  # its live heap entry here, 0: none (the bound alone sets it)

    @property
    def clientid(self) -> str: ...

    @property
    def outbox_bytes(self) -> int: ...

    def drop_oldest(self, reason: str) -> None: ...


class QueuedBytes:
    """The bytes queued in every session's outbox together, bounded (broker.max_queued_bytes).

    A session's own bounds (max_offline_messages / max_offline_bytes) do not bound a fleet: 15,000
    offline sessions each owed distinct messages could hold 15,000 x 64 MB. This keeps the running
    total of every outbox's bytes (the sessions add and subtract as they queue, send, drop and
    end: O(1) per message) and, past `bound`, drops the oldest queued message of the largest
    queue, again and again, until the total is within the bound. In-flight messages (sent, not
    acknowledged) are not queued bytes and are never dropped, as with a session's own bounds.

    Choosing the largest queue without a scan of every session per message: a max-heap of
    (bytes, session), built by one scan of the sessions the first time the total goes over the
    bound and then kept up lazily while it is `live`:
    - every enqueue while it is live pushes the session with its new size (O(log n)); the entry
      it had before becomes stale (its mark no longer matches the session's `heap_mark`);
    - a session that shrank (sent, dropped, ended) is not touched: its entry over-states it, and
      when it comes to the top it is re-keyed with its true size before anything is dropped;
    so the top, once checked, is exactly the largest queue (not an approximation: the unit test
    checks every drop against a brute-force maximum). Stale entries are skipped as they surface,
    and the heap is compacted when it holds more than twice its current entries plus 1024
    (O(entries), paid for by as many pushes before it: O(1) amortised).
    The heap is let go when the total falls under half the bound, so a broker that only touched
    the bound once does not pay a push per enqueue for ever; being rebuilt (O(sessions)) then
    takes at least bound/2 bytes queued again. A scan that runs rarely (drop down to a low mark
    below the bound, then scan again) was the other choice: it is cheaper per message but drops
    more than the bound needs each time, and its choice is only as fresh as its last scan.
    Measured (bench/queued_bound.py, 15,000 sessions, on a 2-core machine busy with other work, so
    the figures spread): an enqueue under the bound 3.7-6 us, as without the bound (one addition,
    two comparisons); at the bound 12-28 us against about 6 us for an enqueue that drops by the
    session's own bound (the heap's push, re-key and stale pops, and a victim in another session's
    memory), paid only while messages are being dropped; a rebuild 11-14 ms, with the default
    4 GiB bound at most once per 2 GiB queued.
    """

    __slots__ = ("_current", "_heap", "_last_log", "_tick", "bound", "dropped", "states", "total")

    def __init__(self, bound: int, states: Mapping[str, Queue]) -> None:
        self.bound = bound
        self.states = states  # every session of the broker (the heap is built from them)
        self.total = 0
        self.dropped = 0  # messages dropped for this bound (also counted in each session's `dropped`)
        self._heap: list[tuple[int, int, Queue]] | None = None  # (-bytes, mark, session)
        self._current = 0  # sessions with a current entry in the heap (their mark)
        self._tick = 0
        self._last_log = 0.0

    @property
    def live(self) -> bool:
        """Whether the heap is kept (the total went over the bound, and not under half of it since)."""
        return self._heap is not None

    def _push(self, state: Queue) -> None:
        heap = self._heap
        assert heap is not None
        if not state.heap_mark:
            self._current += 1
        self._tick += 1
        state.heap_mark = self._tick
        heapq.heappush(heap, (-state.outbox_bytes, self._tick, state))
        if len(heap) > 2 * self._current + 1024:
            self._compact()

    def _compact(self) -> None:
        heap = self._heap
        assert heap is not None
        kept = []
        for entry in heap:
            state = entry[2]
            if entry[1] == state.heap_mark:
                if state.outbox_bytes:
                    kept.append(entry)
                else:
                    state.heap_mark = 0
        heapq.heapify(kept)
        self._heap, self._current = kept, len(kept)

    def _build(self) -> None:
        entries = []
        for state in self.states.values():
            if state.outbox_bytes:
                self._tick += 1
                state.heap_mark = self._tick
                entries.append((-state.outbox_bytes, self._tick, state))
            else:
                state.heap_mark = 0
        heapq.heapify(entries)
        self._heap, self._current = entries, len(entries)

    def _release(self) -> None:
        heap, self._heap, self._current = self._heap, None, 0
        for _, _, state in heap or ():
            state.heap_mark = 0

    def queued(self, state: Queue) -> None:
        """`state` queued a message and the total changed: keep the heap, shed past the bound."""
        if self._heap is not None:
            if self.total < self.bound >> 1:
                self._release()
                return
            self._push(state)
        if self.total > self.bound:
            self.shed()

    def shed(self) -> None:
        """Drop the oldest message of the largest queue until the total is within the bound."""
        if self._heap is None:
            self._build()
        heap = self._heap
        assert heap is not None
        while self.total > self.bound and heap:
            minus, mark, state = heap[0]
            if mark != state.heap_mark:
                heapq.heappop(heap)  # superseded by a later entry of the session
                continue
            if state.outbox_bytes >= -minus:  # its entry is true: the largest queue
                self.dropped += 1
                state.drop_oldest("queued_bytes")
            # its entry over-states it now (it shrank since, or just dropped): its true size goes
            # in its place (one sift, not a pop and a push), or it leaves the heap if it is empty
            size = state.outbox_bytes
            if size:
                self._tick += 1
                state.heap_mark = self._tick
                heapq.heapreplace(heap, (-size, self._tick, state))
            else:
                heapq.heappop(heap)
                state.heap_mark = 0
                self._current -= 1

    def log_drop(self, state: Queue) -> None:
        """At most one warning per _DROP_LOG_INTERVAL for the whole broker (thousands of sessions
        may lose messages to this bound in one second)."""
        now = time.monotonic()
        if self.dropped == 1 or now - self._last_log >= _DROP_LOG_INTERVAL:
            self._last_log = now
            log.warning(
                "queued messages of all sessions over broker.max_queued_bytes (%d bytes): dropped the oldest of"
                " the largest queues, %d dropped so far (last from client %r, %d bytes left in its queue)",
                self.bound,
                self.dropped,
                state.clientid,
                state.outbox_bytes,
            )
