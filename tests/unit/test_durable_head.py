"""The durable store's head (the last sequence number given out) never goes back across a restart
(bridge/brokers/embedded/durable/store.py, `_HEAD_QUERIES`).

The trim deletes the log's newest entries too once every session is past them, while a caught-up
session's `positions` row keeps naming them (its position is the head). Read from the log alone,
the head went back after a restart, and the first messages logged after it got sequence numbers
that session's position had passed: its load (`seq > position`) skipped them, acknowledged and
never delivered (the soak's lost messages, all published within 100 ms of a restart)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bridge.brokers.embedded.durable import DurableStore
from bridge.brokers.embedded.durable.store import FILENAME


def _message(seq: int) -> tuple[object, ...]:
    return (seq, f"{seq:032X}", "t", b"p", 1, 0, "pub", None, 0.0, 1, None)


def _store_with(tmp_path: Path, last_message: int, progress: dict[str, object]) -> None:
    DurableStore(tmp_path).close()  # the schema
    db = sqlite3.connect(tmp_path / FILENAME)
    with db:
        db.executemany("INSERT INTO messages VALUES (?,?,?,?,?,?,?,?,?,?,?)", [_message(n) for n in (3, last_message)])
        db.execute("INSERT INTO positions VALUES (?, ?)", ("dev-1", json.dumps(progress)))
    db.close()


@pytest.mark.parametrize(
    ("progress", "head"),
    [
        ({"position": 42, "inflight": [], "incoming": []}, 42),  # caught up: its position was the head
        ({"position": 5, "inflight": [[57, 1, 1, False, False, ["t"], []]], "incoming": []}, 57),
        ({"position": 5, "inflight": [], "incoming": [], "owed_to": 60}, 60),  # not loaded: owed up to 60
        ({"position": 5, "inflight": [], "incoming": []}, 10),  # the log's newest entry
    ],
)
def test_the_head_is_the_highest_sequence_number_the_store_still_names(
    tmp_path: Path, progress: dict[str, object], head: int
) -> None:
    _store_with(tmp_path, 10, progress)
    store = DurableStore(tmp_path)
    try:
        assert store.head == head
        assert store.reserve() == head + 1  # the next message is past every position
    finally:
        store.close()


def test_an_empty_store_starts_at_zero(tmp_path: Path) -> None:
    store = DurableStore(tmp_path)
    try:
        assert store.head == 0
    finally:
        store.close()


def test_a_damaged_positions_row_does_not_stop_the_store_opening(tmp_path: Path) -> None:
    """What a damaged row means is for the restore to say (it refuses that session); the head is
    read from the rest."""
    _store_with(tmp_path, 10, {"position": 42, "inflight": [], "incoming": []})
    db = sqlite3.connect(tmp_path / FILENAME)
    with db:
        db.execute("INSERT INTO positions VALUES (?, ?)", ("dev-2", '{"position": 99, "inflight": [[1'))
    db.close()
    store = DurableStore(tmp_path)
    try:
        assert store.head == 42
    finally:
        store.close()
