"""throttle.Throttle: one report per interval, the ones between counted into the next."""

from __future__ import annotations

from bridge.brokers.embedded.throttle import Throttle


def test_one_report_per_interval_and_the_next_says_how_many_it_stands_for() -> None:
    now = [1000.0]
    reports = Throttle(10.0, clock=lambda: now[0])
    assert reports.due() == 0  # the first one at once, standing for itself only
    for _ in range(5):
        now[0] += 1.0
        assert reports.due() is None  # within 10 s: counted, not reported
    now[0] += 5.0  # 10 s after the first
    assert reports.due() == 5
    now[0] += 9.9
    assert reports.due() is None
    now[0] += 0.1
    assert reports.due() == 1
