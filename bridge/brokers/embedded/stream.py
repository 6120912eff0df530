"""The ordered event stream of one client.

A client's events come from several tasks: its message loop (connected,
subscribed, publish, disconnected), its sender (delivered), its reader
(acked) and the bridge's own calls (proxy subscriptions). `post()` fixes an
event's place in the client's stream at the moment it happens, without
awaiting; one pump task hands the events to the sink in that order, one call
at a time. `emit()` posts and then waits until the sink has returned for that
event, which is how back-pressure from the sink reaches the client.

The sink is called in its callback form when it has one (the dispatcher's `dispatch`,
bridge/brokers/base.py); the stream makes the event's "kept" future (done once every rule's
action for it is committed or spooled, docs/architecture.md#acknowledged-means-kept), which
`emit()` and the futures of `post(wait=True)` pass on, so a publish can be acknowledged once its
message is kept. When the sink fails, the kept future is a cancelled one: that message is not
kept. `post_run()` posts the events of a run of a client's PUBLISH packets as one entry: one
future for the run and one kept future for all of them, rather than two per message
(docs/benchmarks.md#one-future-per-run-of-events).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence

from bridge.brokers.base import CallbackSink, EventSink
from bridge.brokers.eventloop import running_loop
from bridge.events import Event

# What the sink made of an event (or a run of them): a future done once it is kept, or None when
# nothing has to be waited for (no rule matched it).
Kept = asyncio.Future[None] | None

# An entry of the stream: one event or a run of them, and the future of whoever waits for the
# sink to have taken it (None: nobody; then nobody waits for its commit either).
_Entry = tuple["Event | list[Event]", "asyncio.Future[Kept] | None"]

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
        self._queue: deque[_Entry] | None = None
        self._pump: asyncio.Task[None] | None = None

    def post(self, event: Event, *, wait: bool = False) -> asyncio.Future[Kept] | None:
        """Append `event` to the stream; with `wait`, return a future done once the sink took it
        (its result: the event's kept future)."""
        future: asyncio.Future[Kept] | None = None
        if wait:
            future = running_loop().create_future()
        self._append((event, future))
        return future

    def post_run(self, events: list[Event]) -> asyncio.Future[Kept]:
        """Append a run of events (a client's PUBLISH packets read together) as one entry; return
        a future done once the sink took all of them, its result one kept future for the run:
        done once every event of it is kept, cancelled if the sink failed on any."""
        future: asyncio.Future[Kept] = running_loop().create_future()
        self._append((events, future))
        return future

    def _append(self, entry: _Entry) -> None:
        if self._queue is None:
            self._queue = deque()
        self._queue.append(entry)
        if self._pump is None:
            self._start_pump()

    def _start_pump(self) -> None:
        self._busy.add(self)
        self._pump = running_loop().create_task(self._run(), name=f"hookbridge-events-{self._clientid}")

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
                item, future = queue[0]
                events: Sequence[Event] = item if isinstance(item, list) else (item,)
                kept: Kept = None
                if future is not None:
                    kept = await self._take(events)
                else:
                    await self._give(events)
                queue.popleft()
                if future is not None and not future.done():
                    future.set_result(kept)
        finally:
            self._pump = None
            self._busy.discard(self)
            queue, self._queue = self._queue, None
            if queue:  # cancelled: release whoever waits, the events are lost
                lost = sum(len(item) if isinstance(item, list) else 1 for item, _ in queue)
                log.warning("%d events of client %r not delivered to the sink", lost, self._clientid)
                for _, future in queue:
                    if future is not None and not future.done():
                        future.cancel()
                queue.clear()

    async def _take(self, events: Sequence[Event]) -> Kept:
        """Hand `events` to the sink; their kept future (one for all of them)."""
        sink = self._sink
        # The dispatcher's callback form saves a future per event (bridge/brokers/base.py).
        dispatch: CallbackSink | None = getattr(sink, "dispatch", None)
        counter = _KeptCounter()
        failed = False
        for event in events:
            counter.left += 1  # before the call: a commit may be reported from inside it
            try:
                if dispatch is not None:
                    matched = await dispatch(event, counter.one_done)
                else:
                    matched = counter.watch(await sink(event))
            except asyncio.CancelledError:
                raise
            except Exception:
                # A failing sink must not stop the broker; the dispatcher owns retries.
                log.exception("event sink failed on %s of client %r", type(event).__name__, self._clientid)
                failed = True
                matched = True  # its count stays: the entry's kept future is never done
            if matched:
                counter.matched = True
            else:
                counter.left -= 1
        return _not_kept() if failed else counter.finish()

    async def _give(self, events: Sequence[Event]) -> None:
        """Hand `events` to the sink with nobody waiting for their commit (a delivery's receipt)."""
        sink = self._sink
        dispatch: CallbackSink | None = getattr(sink, "dispatch", None)
        for event in events:
            try:
                if dispatch is not None:
                    await dispatch(event, None)
                else:
                    await sink(event)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("event sink failed on %s of client %r", type(event).__name__, self._clientid)


class _KeptCounter:
    """The kept future of a stream entry: done once the sink reported every event that a rule
    took committed, cancelled once one of them will never be (a sink's own future cancelled).
    Counts from one (the entry itself, given back by `finish`), so commits reported while the
    entry is still being handed over cannot finish it early."""

    __slots__ = ("future", "left", "lost", "matched")

    def __init__(self) -> None:
        self.left = 1
        self.matched = False
        self.lost = False
        self.future: asyncio.Future[None] | None = None

    def one_done(self) -> None:
        self.left -= 1
        future = self.future
        if self.left == 0 and future is not None and not future.done():
            if self.lost:
                future.cancel()
            else:
                future.set_result(None)

    def watch(self, committed: Kept) -> bool:
        """A sink's own future for one event (a sink without the callback form): counted until
        it settles. False: nothing to wait for."""
        if committed is None:
            return False
        committed.add_done_callback(self._settled)
        return True

    def _settled(self, committed: asyncio.Future[None]) -> None:
        if committed.cancelled():
            self.lost = True
        self.one_done()

    def finish(self) -> Kept:
        if not self.matched:
            return None  # no rule took any of them: nothing to wait for
        self.future = running_loop().create_future()
        self.one_done()
        return self.future


def _not_kept() -> Kept:
    """The kept future of an event the sink failed on: such a publish is never acknowledged."""
    kept: asyncio.Future[None] = running_loop().create_future()
    kept.cancel()
    return kept
