"""The synthetic fleet: time-ordered, flapping, lossy where it should be, and its rules load."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bridge.app import Paths, load_all
from bridge.events import ClientConnected, ClientDisconnected, MessageAcked, MessageDelivered, MessagePublish
from bridge.msgid import timestamp_us
from spark_analytics.fleet import Fleet, events, rules_text
from support.conf import BASE_CONFIG

FLEET = Fleet(devices=60, hours=2, flapping=0.2, lost_disconnects=0.1, start=1_780_000_000.0)


def test_events_come_in_time_order_with_matching_ids() -> None:
    stream = list(events(FLEET))
    times = [event.timestamp for event in stream]
    assert times == sorted(times)
    assert FLEET.begin <= times[0] and times[-1] < FLEET.end + 1
    for event in stream:
        if isinstance(event, MessagePublish):
            assert timestamp_us(event.msgid) == int(event.timestamp * 1_000_000)  # Cassandra buckets by it
    assert len({e.msgid for e in stream if isinstance(e, MessagePublish)}) == sum(
        isinstance(e, MessagePublish) for e in stream
    )


def test_a_realistic_mix() -> None:
    stream = list(events(FLEET))
    kinds = Counter(type(event).__name__ for event in stream)
    connects = Counter(e.clientid for e in stream if isinstance(e, ClientConnected))
    disconnects = Counter(e.clientid for e in stream if isinstance(e, ClientDisconnected))
    assert max(connects.values()) > 10  # flapping devices
    assert sum(connects.values()) - 62 > sum(disconnects.values())  # some disconnects never logged
    qos = Counter(e.qos for e in stream if isinstance(e, MessagePublish))
    assert set(qos) == {0, 1, 2} and qos[1] > qos[2]
    assert any(e.retain for e in stream if isinstance(e, MessagePublish))
    assert kinds["MessageDelivered"] == kinds["MessageAcked"] > 0
    receipts = [e for e in stream if isinstance(e, MessageDelivered | MessageAcked)]
    assert {e.clientid for e in receipts} == {"app-north", "app-south"}
    assert events(FLEET).__next__() == next(iter(events(FLEET)))  # same seed, same fleet


def test_rules_load_on_one_or_three_pools(tmp_path: Path) -> None:
    pools = "".join(f"backend.pgsql.{name}.server = 127.0.0.1:5439\n" for name in ("pool1", "log", "acks"))
    (tmp_path / "bridge.conf").write_text(BASE_CONFIG + pools)
    for text in (rules_text("pgsql.pool1"), rules_text("pgsql.pool1", "pgsql.log", "pgsql.acks")):
        (tmp_path / "rules").mkdir(exist_ok=True)
        (tmp_path / "rules" / "fleet.conf").write_text(text)
        _config, rules = load_all(Paths(tmp_path / "bridge.conf", tmp_path / "rules"))
        assert len(rules) == 8
    assert {rule.pool for rule in rules} == {"pgsql.log", "pgsql.pool1", "pgsql.acks"}
