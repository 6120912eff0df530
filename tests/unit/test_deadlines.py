"""The embedded broker's deadline wheel: each connection looked at once when its deadline falls due."""

from __future__ import annotations

from bridge.brokers.embedded.deadlines import Deadlines


def test_items_come_out_once_when_their_slot_has_passed() -> None:
    wheel: Deadlines[str] = Deadlines(0.5, now=100.0)
    wheel.watch("a", 101.2)
    wheel.watch("b", 103.0)
    wheel.watch("late", 50.0)  # already past: the next slot, never one handed out
    assert wheel.due(100.4) == []
    assert wheel.due(100.6) == ["late"]
    assert wheel.due(101.2) == []  # a deadline is looked at after it, not at it
    assert wheel.due(101.6) == ["a"]
    assert wheel.due(101.6) == []  # once
    assert len(wheel) == 1
    assert wheel.due(200.0) == ["b"]  # after a long pause, every passed slot
    assert len(wheel) == 0


def test_fifteen_thousand_watched_few_looked_at() -> None:
    """A fleet with a 90 s keepalive limit: a sweep hands out only those due, not the fleet."""
    wheel: Deadlines[int] = Deadlines(0.5, now=0.0)
    for n in range(15_000):
        wheel.watch(n, 90.0 + n * 0.006)  # spread over the 90 s after the first deadline
    handed = [len(wheel.due(t / 2)) for t in range(1, 181)]  # 90 s of sweeps
    assert sum(handed) == 0
    handed = [len(wheel.due(90 + t / 2)) for t in range(1, 181)]
    assert sum(handed) == 15_000 and max(handed) <= 100
