"""SortedKeys (bridge/brokers/embedded/sortedkeys.py), the order the API pages by, against a plain
sorted set under random adds and removes, across block splits and merges; and the two structures
that keep one (the broker's session table, the retained tree) through their own ways of change."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

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


def session(clientid: str, username: str | None = None) -> Any:
    return SimpleNamespace(clientid=clientid, username=username)  # what the table reads of a session


def test_the_session_table_and_the_retained_tree_keep_their_keys_in_order() -> None:
    table = SessionTable()
    for clientid in ("b", "a", "c\x01", "a"):
        table[clientid] = session(clientid)
    del table["b"]
    assert table.pop("zz", None) is None
    table.pop("a")
    assert list(table.ids.after(None)) == ["c\x01"] == list(table)
    tree: RetainedTree[str] = RetainedTree()
    for topic in ("s/2", "s/1", "$SYS/x", "s/1"):
        tree[topic] = topic
    assert tree.pop("s/2") == "s/2" and tree.pop("s/9") is None
    assert list(tree.topics.after(None)) == ["$SYS/x", "s/1"]


def test_the_session_table_keeps_each_users_client_ids_in_order() -> None:
    """`user_ids` (the API's `?user=`) through every way the table changes: set, replace by another
    user's session, del, pop, a resumed session's new user name; user names that are prefixes of
    each other (`ann`, `ann2`, and the empty one) stay apart."""
    table = SessionTable()
    for clientid, user in (("c3", "ann"), ("c1", "ann"), ("c2", "ann2"), ("c4", ""), ("c5", None), ("c0", "ann")):
        table[clientid] = session(clientid, user)

    def ids(user: str, after: str | None = None, inclusive: bool = False) -> list[str]:
        return list(table.user_ids(user, after, inclusive=inclusive))

    assert (ids("ann"), ids("ann2"), ids(""), ids("an")) == (["c0", "c1", "c3"], ["c2"], ["c4"], [])
    assert ids("ann", "c1") == ["c3"] and ids("ann", "c1", inclusive=True) == ["c1", "c3"] and ids("ann", "c3") == []
    table["c1"] = session("c1", "bob")  # a new session of the client id, another user's
    del table["c0"]
    assert table.pop("c3").username == "ann"
    assert (ids("ann"), ids("bob")) == ([], ["c1"])
    table.set_username(table["c2"], "bob")  # resumed by bob
    table.set_username(session("c2", "ann"), "carol")  # not the table's session of c2: nothing changes
    table.set_username(table["c5"], "ann")  # an anonymous session now ann's
    assert (ids("ann"), ids("ann2"), ids("bob"), ids("carol")) == (["c5"], [], ["c1", "c2"], [])
    table.set_username(table["c5"], None)
    for clientid in list(table):
        del table[clientid]
    assert len(table._by_user) == 0
