"""Durable sessions (`broker.durable_sessions = on`): sessions and messages that survive a restart.

- `store.py`: the on-disk store (SQLite in WAL mode): a message log keyed by a time-ordered
  sequence (each message once), a row per durable session, the retained messages; commits in
  batches, one per event-loop step.
- `journal.py`: what the broker writes to it (a session's position in the log, its in-flight
  window, subscriptions and will) and how it rebuilds sessions from it at start.
"""

from bridge.brokers.embedded.durable.journal import Journal, hold_incoming, stored_fields
from bridge.brokers.embedded.durable.store import DurableStore, StoreError, UnreadableSession, full_check

__all__ = ["DurableStore", "Journal", "StoreError", "UnreadableSession", "full_check", "hold_incoming", "stored_fields"]
