"""The ordered event stream of one client.

A client's events come from several tasks: its message loop (connected,
subscribed, publish, disconnected), its sender (delivered), its reader
(acked) and the bridge's own calls (proxy subscriptions). `post()` fixes an
event's place in the client's stream at the moment it happens, without
awaiting; one pump task hands the events to the sink in that order, one call
at a time. `emit()` posts and then waits until the sink has returned for that
event, which is how back-pressure from the sink reaches the client.

The sink's return value is the event's "kept" future (done once every rule's action for
it is committed or spooled, docs/architecture.md#acknowledged-means-kept); `emit()` and the futures of `post(wait=True)`
pass it on, so a publish can be acknowledged once its message is kept. When the sink
fails, the kept future is a cancelled one: that message is not kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from bridge.brokers.base import EventSink
from bridge.events import Event

# What the sink returned for an event: a future done once the event is kept, or None when
# nothing has to be waited for (no rule matched it).
Kept = asyncio.Future[None] | None

log = logging.getLogger("bridge.brokers.embedded")


class EventStream:
    __slots__ = ("__weakref__", "_busy", "_clientid", "_pump", "_queue", "_sink")

    def __init__(self, sink: EventSink, clientid: str, busy: set[EventStream] | None = None) -> None:
        self._sink = sink
        self._clientid = clientid
        # The broker's set of streams with events in flight; a stream outlives a
        # discarded session until its last event (client.disconnected) is out.
        self._busy = busy if busy is not None else set()
        # Made when an event comes and dropped when the stream is idle again: an empty deque costs
        # about 600 bytes, and most of a fleet's connections are idle (docs/benchmarks.md#fleet-scale: 3 KB each).
        self._queue: deque[tuple[Event, asyncio.Future[Kept] | None]] | None = None
        self._pump: asyncio.Task[None] | None = None

    def post(self, event: Event, *, wait: bool = False) -> asyncio.Future[Kept] | None:
        """Append `event` to the stream; with `wait`, return a future done once the sink took it
        (its result: the event's kept future)."""
        future: asyncio.Future[Kept] | None = None
        if wait:
            future = asyncio.get_running_loop().create_future()
        if self._queue is None:
            self._queue = deque()
        self._queue.append((event, future))
        if self._pump is None:
            self._start_pump()
        return future

    def _start_pump(self) -> None:
        self._busy.add(self)
        self._pump = asyncio.create_task(self._run(), name=f"hookbridge-events-{self._clientid}")

    async def emit(self, event: Event) -> Kept:
        """Post `event` and wait until the sink has returned for it; returns its kept future."""
        # Always through the pump task: one task calls the sink for this client, whoever posted,
        # so the sink sees one call at a time in stream order, and cancelling the caller (a
        # connection's task ending) cannot stop the sink halfway through a runner's put.
        # A direct call from an idle stream (one task switch fewer per message) was tried and
        # reverted in commit 1085322: with `spool.overflow = drop_oldest` and the pool down, the
        # runner's put waited for good, as drop_oldest would not drop the segment its lane was
        # reading and that segment held the whole spool. The spool has since kept the batch in
        # flight apart from the queue behind it (d029812, 59fd2cd), and test_spool_overflow.py
        # passes with the direct call as well (three runs, 2026-11-28): the pump is kept for
        # the reasons above, not as a workaround.
        future = self.post(event, wait=True)
        assert future is not None
        return await future

    @property
    def idle(self) -> bool:
        return self._pump is None

    async def drain(self) -> None:
        """Wait until every posted event reached the sink."""
        while self._pump is not None:
            await asyncio.shield(self._pump)

    def cancel(self) -> None:
        if self._pump is not None:
            self._pump.cancel()

    async def _run(self) -> None:
        try:
            queue = self._queue
            while queue:
                event, future = queue[0]
                kept: Kept
                try:
                    kept = await self._sink(event)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    # A failing sink must not stop the broker; the dispatcher owns retries.
                    log.exception("event sink failed on %s of client %r", type(event).__name__, self._clientid)
                    kept = _not_kept()
                queue.popleft()
                if future is not None and not future.done():
                    future.set_result(kept)
        finally:
            self._pump = None
            self._busy.discard(self)
            queue, self._queue = self._queue, None
            if queue:  # cancelled: release whoever waits, the events are lost
                log.warning("%d events of client %r not delivered to the sink", len(queue), self._clientid)
                for _, future in queue:
                    if future is not None and not future.done():
                        future.cancel()
                queue.clear()


def _not_kept() -> Kept:
    """The kept future of an event the sink failed on: such a publish is never acknowledged."""
    kept: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    kept.cancel()
    return kept
