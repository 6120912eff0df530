"""bench/mqtt_report.py, the external-broker bench's judgement of what a subscriber stored: every
published sequence number exactly once (a lost, a doubled and a foreign one are each caught),
and latency percentiles from each message's first commit. Pure functions over payloads; the run
itself is tests/integration/test_mqtt_bench.py."""

from __future__ import annotations

from bench.mqtt_publish import PAD, payload_fields
from bench.mqtt_report import percentiles, verdict


def payload(seq: int, published_ns: int = 1_000_000_000) -> bytes:
    return b"%d|%d|%s" % (published_ns, seq, PAD)


def test_every_sequence_number_once_is_exactly_once() -> None:
    assert verdict([payload(seq) for seq in (2, 0, 1)], range(3)) == ("exactly once", True)


def test_a_lost_message_is_reported() -> None:
    assert verdict([payload(0), payload(2)], range(3)) == ("1 lost, 0 extra", False)


def test_a_message_stored_twice_is_reported() -> None:
    assert verdict([payload(0), payload(1), payload(1), payload(2)], range(3)) == ("0 lost, 1 extra", False)


def test_a_message_that_was_not_published_is_reported() -> None:
    assert verdict([payload(seq) for seq in range(4)], range(3)) == ("0 lost, 1 extra", False)


def test_probes_and_foreign_payloads_are_not_bench_messages() -> None:
    assert payload_fields(b"probe") is None
    assert payload_fields(b"12|x|pad") is None
    assert verdict([payload(0), b"probe"], range(1)) == ("exactly once", True)


def test_latency_counts_each_paced_message_once_from_its_first_commit() -> None:
    ms = 1_000_000
    commits = [
        (1_000_000_000 + 5 * ms, payload(10)),
        (1_000_000_000 + 9 * ms, payload(10)),  # a second commit of 10: not its latency
        (1_000_000_000 + 7 * ms, payload(11)),
        (1_000_000_000 + 1 * ms, payload(3)),  # not in the paced range
    ]
    assert percentiles(commits, range(10, 12)) == (7.0, 7.0)
    assert percentiles(commits[:1], range(10, 12)) == (5.0, 5.0)
    assert percentiles([], range(10, 12)) is None
