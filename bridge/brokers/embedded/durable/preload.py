"""Every restored session's queue read at start, in one pass over the log (broker.durable_preload).

After a restart the whole fleet tends to come back at once. Read back one session at a time as
each client returns (journal.py's `load`), the queues cost a query on the event loop per
CONNECT, and the bookkeeping that lets a session not loaded keep its queue limits (owed.py: a
`routes` row per owed entry, written at start and deleted again as the session catches up)
costs the store's writer as much again, all while the storm is on. Mosquitto reads its whole
database into memory at start instead. This does the same while the log is small enough:

- one range read of the log after the lowest position of the restored sessions, each entry
  given to the sessions it may concern (a superset: `gather`) — those whose non-shared
  subscriptions match its topic (the router's own tree) and those it was given to by name or is
  owed by a `routes` row, each only past its own position;
- each session's in-flight window, read by sequence number;
- then every session's queue is built as its own `load` would build it (`Journal._queue_read`:
  its subscriptions' rules, its queue limits, message expiry), and it counts as loaded.

Sessions so loaded need no `routes` rows: the trim is again one range delete below the lowest
position (journal.py's `trim_bound`), but for a session away (journal.py's `_ABSENT_AFTER`).

The log after the lowest position is measured first: its entries counted up to as many as the
budget can hold (each costs MESSAGE_OVERHEAD at least; a count stops there, so a log of millions
costs milliseconds), then their bytes. When it is over the budget, or the pass finds the
queues together over it (a message for several sessions is counted for each), nothing is kept
and the sessions are loaded one at a time as before. The budget is bytes as the queue limits
count them (topic, payload and MESSAGE_OVERHEAD a message), so it is also what the queues add to
broker.max_queued_bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bridge.brokers.embedded.durable.store import DurableStore, MessageRow
from bridge.brokers.embedded.router import Router
from bridge.brokers.embedded.sessions import MESSAGE_OVERHEAD, SessionState


@dataclass(slots=True)
class Gathered:
    """What one pass over the log found for the sessions waiting to be loaded."""

    rows: dict[str, dict[int, MessageRow]] = field(default_factory=dict)  # client id -> seq -> row
    in_flight: dict[int, MessageRow] = field(default_factory=dict)  # seq -> row, of every in-flight window


def gather(store: DurableStore, router: Router, waiting: Mapping[str, SessionState], budget: int) -> Gathered | None:
    """The log entries that may concern each of `waiting` (restored, not loaded), past its
    position: the superset its own `load` would read (store.logged_for). None when they come
    to more than `budget` bytes. Raises sqlite3.Error when the store cannot be read."""
    if not waiting:
        return Gathered()
    low = min(state.position for state in waiting.values())
    most = budget // MESSAGE_OVERHEAD  # entries that can fit: each goes to one session at least
    if store.log_entries_after(low, most + 1) > most or store.log_bytes_after(low) > budget:
        return None
    by_name: dict[int, list[str]] = {}
    for entry, owed in store.routes_after(low):
        by_name.setdefault(entry, []).append(owed)
    found = Gathered()
    rows = found.rows
    size = 0  # the entries found for each session, as the queue limits count them
    for row in store.log_after(low):
        seq: int = row[0]
        topic: str = row[2]
        concerned = router.subscribed(topic) if row[9] else []  # fanout: by subscription
        named = by_name.get(seq)  # each session of its `targets` has its row too
        if named is not None:
            concerned += [waiting[clientid] for clientid in named if clientid in waiting]
        cost = len(topic) + len(row[3]) + MESSAGE_OVERHEAD
        for state in concerned:
            if seq <= state.position or state.unloaded is None:
                continue
            clientid = state.clientid
            mine = rows.get(clientid)
            if mine is None:
                mine = rows[clientid] = {}
            if seq not in mine:
                mine[seq] = row
                size += cost
        if size > budget:
            return None
    seqs = sorted({entry[0] for state in waiting.values() if state.unloaded for entry in state.unloaded["inflight"]})
    found.in_flight = {row[0]: row for row in store.messages_at(seqs)}
    return found
