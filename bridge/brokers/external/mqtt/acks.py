"""Messages received from the broker and not yet acknowledged, acknowledged in arrival order.

MQTT requires PUBACKs in the order the PUBLISHes arrived (3.1.1 4.6, 5.0 4.6), and
docs/architecture.md#acknowledged-means-kept allows one only once every rule for the message has
committed. Rules of different messages commit in any order (different lanes, different pools), so
each message waits here until it and every message before it are done; then the whole run at the
head leaves at once.

This replaced a chain of futures (each message's ack future waited on the previous one): a
chain of n resolves over n event-loop turns, one PUBACK write each. Here a committed batch
of n messages is one pass over the head of a deque and one PUBACK write (client.py
coalesces the packet ids of one loop turn).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class Unacked:
    """One message between arrival and acknowledgement."""

    __slots__ = ("acked", "done", "packet_id", "puback", "waiting")

    def __init__(self, packet_id: int | None, puback: bool) -> None:
        self.packet_id = packet_id
        self.puback = puback  # QoS 1: the source sends its PUBACK (QoS 2: gmqtt, after `acked`)
        # Jobs (rules) still to commit, plus one while the message is being dispatched: it cannot
        # be acknowledged before the dispatcher has seen every rule that matches it.
        self.waiting = 1
        self.done = False
        self.acked: asyncio.Future[None] | None = None  # for a caller that awaits the ack (QoS 2)


class AckWindow:
    """The in-order acknowledgement queue of one broker connection."""

    def __init__(self, acknowledge: Callable[[list[Unacked]], None]) -> None:
        # Called with the messages that may now be acknowledged, oldest first.
        self._acknowledge = acknowledge
        self._window: deque[Unacked] = deque()
        self.emptied = asyncio.Event()
        self.emptied.set()

    def __len__(self) -> int:
        return len(self._window)

    def arrived(self, packet_id: int | None, puback: bool) -> Unacked:
        message = Unacked(packet_id, puback)
        self._window.append(message)
        self.emptied.clear()
        return message

    def settle(self, message: Unacked) -> None:
        """One of the message's waits is over (a rule committed, or dispatching ended)."""
        message.waiting -= 1
        if message.waiting > 0:
            return
        message.done = True
        window = self._window
        if not window or window[0] is not message:
            return  # an older message is still waiting: this one leaves with it
        ready = []
        while window and window[0].done:
            ready.append(window.popleft())
        if not window:
            self.emptied.set()
        self._acknowledge(ready)
