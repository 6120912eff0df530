"""SortedKeys (bridge/brokers/embedded/sortedkeys.py), the order the API pages by, against a plain
sorted set under random adds and removes, across block splits and merges; and the two structures
that keep one (the broker's session table, the retained tree) through their own ways of change."""

from __future__ import annotations

import random

import pytest

from bridge.brokers.embedded import sortedkeys
from bridge.brokers.embedded.sessiontable import SessionTable
from bridge.brokers.embedded.sortedkeys import SortedKeys
from bridge.brokers.embedded.topictree import RetainedTree


def test_the_same_order_as_a_sorted_set_through_random_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sortedkeys, "BLOCK", 8)  # many splits and merges with few keys
    rng = random.Random(37)
    keys = SortedKeys()
    expected: set[str] = set()
    words = [f"{rng.randrange(3000):x}/{'é' if n % 7 == 0 else ''}{n % 13}" for n in range(3000)]
    for step in range(20_000):
        word = rng.choice(words)
        if rng.random() < 0.55:
            keys.add(word)
            expected.add(word)
        else:
            keys.discard(word)
            expected.discard(word)
        if step % 997 == 0:
            ordered = sorted(expected)
            assert list(keys.after(None)) == ordered
            assert len(keys) == len(ordered)
            probe = rng.choice(words)
            assert list(keys.after(probe)) == [k for k in ordered if k > probe]
            assert list(keys.after(probe, inclusive=True)) == [k for k in ordered if k >= probe]
            assert (probe in keys) == (probe in expected)
    for word in list(expected):  # emptied: nothing left behind
        keys.discard(word)
    assert len(keys) == 0 and list(keys.after(None)) == [] and keys._blocks == [] and keys._maxes == []


def test_the_session_table_and_the_retained_tree_keep_their_keys_in_order() -> None:
    table = SessionTable()
    for clientid in ("b", "a", "c\x01", "a"):
        table[clientid] = object()  # type: ignore[assignment]
    del table["b"]
    assert table.pop("zz", None) is None
    table.pop("a")
    assert list(table.ids.after(None)) == ["c\x01"] == list(table)
    tree: RetainedTree[str] = RetainedTree()
    for topic in ("s/2", "s/1", "$SYS/x", "s/1"):
        tree[topic] = topic
    assert tree.pop("s/2") == "s/2" and tree.pop("s/9") is None
    assert list(tree.topics.after(None)) == ["$SYS/x", "s/1"]
