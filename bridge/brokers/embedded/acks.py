"""A client's acknowledgements waiting for their messages to be kept, written in arrival order.

A PUBACK / PUBREC goes out only once every rule's action for its message is committed or spooled
(docs/architecture.md#acknowledged-means-kept), and in the order the PUBLISH packets came in
[MQTT-4.6.0-2]. Rules of different messages commit in any order, so each acknowledgement waits
here until its message and every message before it are kept; then the whole run at the head
leaves in one write. A message that was not kept (its kept future cancelled) is never
acknowledged: the client is disconnected and sends it again on its next connection.

Bounded (`limit`): past it the client's message loop waits in `add`, its inbox fills and the
connection stops reading from the socket. The same shape as the MQTT source's
bridge/brokers/external/mqtt/acks.py, for the broker's side of the wire. It holds no socket: it
is given where the acknowledgements go (`send`) and what to do when a message was lost (`lost`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridge.brokers.eventloop import running_loop

if TYPE_CHECKING:
    from bridge.brokers.embedded.stream import Kept

log = logging.getLogger("bridge.brokers.embedded")


class AckQueue:
    """The in-order acknowledgement queue of one client connection."""

    # Slots, and the deque made only while it holds something: a fleet's connections mostly
    # have nothing waiting (docs/benchmarks.md#fleet-scale).
    __slots__ = ("_closed", "_flush_soon", "_limit", "_lost", "_pending", "_room", "_send")

    def __init__(self, limit: int, send: Callable[[list[bytes], int], None], lost: Callable[[], None]) -> None:
        self._limit = limit
        # Called with the acknowledgements that may go out now, oldest first, and how many of
        # them are PUBACKs (a QoS 1 message's exchange is over with its PUBACK).
        self._send = send
        self._lost = lost  # a message was not kept: the connection closes, unacknowledged
        self._pending: deque[tuple[Kept, bytes, int]] | None = None  # (kept, ack bytes, qos)
        self._room: asyncio.Future[None] | None = None  # a waiter in `add` or `drained`
        self._flush_soon = False
        self._closed = False

    def __len__(self) -> int:
        return len(self._pending) if self._pending is not None else 0

    async def add(self, kept: Kept, ack: bytes, qos: int = 2) -> None:
        """Queue `ack` to go out once `kept` is done (None: at once), after every ack queued
        before it; waits while `limit` acks wait. Dropped once closed: the client sends the
        message again on its next connection."""
        while len(self) >= self._limit and not self._closed:
            await self._wait_room()
        if self._closed:
            return
        pending = self._pending
        if pending is None:
            pending = self._pending = deque()
        pending.append((kept, ack, qos))
        if kept is not None and not kept.done():
            # The messages of a run share one kept future (stream.post_run): its first ack's
            # callback flushes them all.
            if len(pending) < 2 or pending[-2][0] is not kept:
                kept.add_done_callback(self._kept)
        elif len(pending) == 1:
            self._kept(None)

    async def drained(self) -> None:
        """Wait until every queued acknowledgement went out (or the queue was closed)."""
        while self._pending and not self._closed:
            await self._wait_room()

    def close(self) -> None:
        """The connection ends: nothing more is queued, and whoever waits stops waiting."""
        self._closed = True
        self._release()

    async def _wait_room(self) -> None:
        room = self._room
        if room is None or room.done():  # waiters share one future (in practice: the client's task)
            room = self._room = running_loop().create_future()
        await room

    def _release(self) -> None:
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)

    def _kept(self, _: Any) -> None:
        if not self._flush_soon:  # every ack kept in this loop step goes out in one write
            self._flush_soon = True
            running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_soon = False
        pending = self._pending
        if pending is None:
            return
        out: list[bytes] = []
        pubacks = 0
        while pending and (pending[0][0] is None or pending[0][0].done()):
            kept, ack, qos = pending.popleft()
            if kept is not None and kept.cancelled():
                pending.clear()
                self._lost()
                break
            out.append(ack)
            if qos == 1:
                pubacks += 1
        if out:
            self._send(out, pubacks)
        if len(pending) < self._limit or self._closed:
            self._release()
        if not pending:
            self._pending = None
