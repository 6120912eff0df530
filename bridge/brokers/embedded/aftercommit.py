"""Packets a durable session's client may see only once the durable store holds the state they
announce (docs/brokers.md#exactly-once), and the packets of its outgoing stream behind them.

Four kinds of packet tell a client something the broker must still know after a `kill -9`:
- a QoS 2 PUBLISH gives its message a packet id. Were the process to die before the store had
  that id, the broker would come back with the message still queued and send it again under
  another id: the client, which holds the first id until its PUBREL (MQTT 4.3.3), takes it for a
  new message (delivered twice), and the first id stays held for good, so the next message the
  broker sends under it is taken for a resend and dropped (one lost);
- a PUBREL says the broker has the client's PUBREC. Come back without it, the broker would send
  the PUBLISH again after its PUBREL: a second delivery;
- a PUBCOMP frees the packet id of the client's own QoS 2 message. Come back still holding it,
  the broker would take the client's next message under that id for a resend and drop it;
- a SUBACK or UNSUBACK says the session has (or no longer has) its filters. Come back without
  them, the broker would answer the client's reconnect with "session present" and a session
  that lacks a filter the client was told it has: the client does not subscribe again, and
  what it subscribed to never reaches it (or the other way round, messages it unsubscribed from).

So a channel hands these to its socket side with the commit they wait for (`Commit`: the
journal's `committed`, which is None when nothing is pending), and `AfterCommit` holds them, and
every ordered write behind them (PUBLISH order, PUBREL order: MQTT 4.6), until that commit is
done. A commit that failed is waited for again: the journal writes the same state with its next
commit. QoS 1 deliveries wait only when something is held before them: a QoS 1 message sent
again after a crash under another id is a duplicate QoS 1 allows, and no id stays held.

What is held is one group commit's worth (broker.durable_commit_interval and the write); the
connection counts its bytes against broker.max_output_bytes like its socket's buffer, and
drops them when it ends.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

# Where the state a packet announces gets committed: a future done once everything pending now
# is in the durable store (cancelled: that commit failed), or None when nothing is pending.
Commit = Callable[[], "asyncio.Future[None] | None"]


@dataclass(slots=True)
class _Held:
    waits: asyncio.Future[None] | None  # None: it waits only for its place in the order
    commit: Commit | None  # gives the commit to wait for again when `waits` failed
    data: bytes
    packets: int


class AfterCommit:
    """One connection's writes waiting for commits, oldest first; written in order as their
    commits are done, each run of them in one write."""

    __slots__ = ("_drained", "_held", "_write", "bytes")

    def __init__(self, write: Callable[[bytes, int], object], drained: Callable[[], None]) -> None:
        self._held: deque[_Held] = deque()
        self._write = write
        self._drained = drained  # called once nothing is held any more
        self.bytes = 0  # held, not yet written

    def hold(self, data: bytes, packets: int, waits: asyncio.Future[None] | None, commit: Commit | None) -> None:
        """Write `data` once `waits` is done and everything held before it is written."""
        self._held.append(_Held(waits, commit, data, packets))
        self.bytes += len(data)
        if waits is not None:
            waits.add_done_callback(self._release)
        elif len(self._held) == 1:
            self._release()

    def drop(self) -> None:
        """The connection ended: nothing held goes out, and nothing stays in memory waiting for a
        commit (a store that keeps failing would hold it); what it carried is sent again from the
        session's window on its next connection."""
        self._held.clear()
        self.bytes = 0

    def _release(self, _done: object = None) -> None:
        held = self._held
        if not held:
            return  # a later callback of a commit whose writes went out already
        out: list[bytes] = []
        packets = 0
        while held:
            first = held[0]
            waits = first.waits
            if waits is not None:
                if not waits.done():
                    return self._flush(out, packets)
                if waits.cancelled() and first.commit is not None:  # failed: the next commit writes the same state
                    again = first.commit()
                    if again is not None:
                        first.waits = again
                        again.add_done_callback(self._release)
                        return self._flush(out, packets)
            held.popleft()
            out.append(first.data)
            packets += first.packets
            self.bytes -= len(first.data)
        self._flush(out, packets)
        self._drained()

    def _flush(self, out: list[bytes], packets: int) -> None:
        if out:
            self._write(b"".join(out), packets)
