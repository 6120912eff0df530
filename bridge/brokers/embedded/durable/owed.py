"""What a durable session not loaded since a restart is owed, counted without loading it.

After a restart a durable session's queue stays in the store until it is first needed
(journal.py). So that the queue limits hold for it as for a loaded one, every log entry it is
owed has a row (seq, client id) in the store's `routes` table:
- its backlog from before the restart: matched once against its subscriptions in the store
  (store.Owe, on the writer thread, at start);
- each message routed or given to it since: its `routes` row is written with the message.
`Owed` keeps the (sequence number, size) of those rows, oldest first, and their total size, as
the session's queue would (sessions.Outgoing.size: topic + payload + MESSAGE_OVERHEAD), so the
queue limits (broker.max_offline_messages / max_offline_bytes) drop its oldest entries by the
same rule as a loaded session's, counted under the same reasons; a dropped entry's row goes
(store.Batch.unroutes), and the log entry with it once nobody else is owed it. About 60 bytes
of memory per owed entry, against the whole message for a loaded queue.

The count includes entries the session's subscriptions match by topic that it would not get
(a subscription made after the message, no-local, a QoS 0 delivery): a few more than its queue
would hold, never fewer; the load applies those rules as the router does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from bridge.brokers.embedded.limits import Limits


class Owed:
    __slots__ = ("bytes", "complete", "entries")

    def __init__(self) -> None:
        self.entries: deque[tuple[int, int]] = deque()  # (seq, size), oldest first
        self.bytes = 0
        # Its backlog from before the restart is in `routes` and counted here: until then
        # nothing is dropped (the oldest entries are not known yet).
        self.complete = False

    @property
    def count(self) -> int:
        return len(self.entries)

    def add(self, seq: int, size: int) -> None:
        """A message logged for it (newer than every entry)."""
        self.entries.append((seq, size))
        self.bytes += size

    def add_backlog(self, rows: Iterable[tuple[int, int]]) -> None:
        """Its backlog counted by the store: older than every entry added since the restart."""
        known = {seq for seq, _ in self.entries}
        older = [(seq, size) for seq, size in rows if seq not in known]
        self.entries.extendleft(reversed(older))
        self.bytes += sum(size for _, size in older)
        self.complete = True

    def over(self, limits: Limits) -> Iterator[tuple[int, str]]:
        """Drop the oldest entries past the queue limits (the newest is always kept, as in a
        loaded queue): yields (seq, reason) of each."""
        if not self.complete:
            return
        count_limit, byte_limit = limits.max_offline_messages, limits.max_offline_bytes
        entries = self.entries
        while len(entries) > 1:
            if count_limit and len(entries) > count_limit:
                reason = "offline_messages"
            elif self.bytes > byte_limit:
                reason = "offline_bytes"
            else:
                return
            seq, size = entries.popleft()
            self.bytes -= size
            yield seq, reason
