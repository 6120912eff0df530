"""durable/owed.py: what a session not loaded is owed, dropped past the queue limits as a loaded
queue drops (oldest first, the newest always kept), and nothing dropped before its backlog is known."""

from __future__ import annotations

from bridge.brokers.embedded.durable.owed import Owed
from bridge.brokers.embedded.limits import Limits


def test_nothing_is_dropped_until_the_backlog_is_counted_then_the_oldest_go_first() -> None:
    owed = Owed()
    limits = Limits(max_offline_messages=3, max_offline_bytes=1 << 20)
    for seq in (10, 11, 12, 13, 14):
        owed.add(seq, 100)
    assert list(owed.over(limits)) == []  # the backlog before the restart is older: not known yet
    owed.add_backlog([(3, 100), (7, 100), (11, 100)])  # 11 was added since: counted once
    assert [seq for seq, _ in owed.entries] == [3, 7, 10, 11, 12, 13, 14]
    assert list(owed.over(limits)) == [
        (3, "offline_messages"),
        (7, "offline_messages"),
        (10, "offline_messages"),
        (11, "offline_messages"),
    ]
    assert (owed.count, owed.bytes) == (3, 300)


def test_the_byte_limit_keeps_the_newest_even_when_it_alone_is_over() -> None:
    owed = Owed()
    owed.add_backlog([])
    limits = Limits(max_offline_messages=0, max_offline_bytes=1024)
    owed.add(1, 600)
    owed.add(2, 600)
    assert list(owed.over(limits)) == [(1, "offline_bytes")]
    owed.add(3, 5000)
    assert list(owed.over(limits)) == [(2, "offline_bytes")]
    assert [seq for seq, _ in owed.entries] == [3] and owed.bytes == 5000
