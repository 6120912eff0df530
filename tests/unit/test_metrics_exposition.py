"""/metrics through prometheus_client prints what the hand-written renderer printed: the same
families (HELP and TYPE lines byte for byte, in the same order), the same samples (names, labels,
values), for one bridge and for `--workers N`'s merged numbers. The old output is kept in
tests/unit/metrics_before/ (captured from the old code for the state in metrics_state.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from metrics_state import one_bridge, two_workers
from prometheus_client.parser import text_string_to_metric_families

from bridge.ops.metrics import render_families

BEFORE = Path(__file__).parent / "metrics_before"

Samples = set[tuple[str, tuple[tuple[str, str], ...], float]]


def samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def comments(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("# ")]


@pytest.mark.parametrize(
    ("before", "now"),
    [("one.txt", lambda: one_bridge().render()), ("workers.txt", lambda: render_families(two_workers()))],
)
def test_the_exposition_keeps_names_labels_values_help_and_type(before: str, now: object) -> None:
    old = (BEFORE / before).read_text()
    new = now()  # type: ignore[operator]
    assert comments(new) == comments(old)
    assert samples(new) == samples(old)
    assert len(samples(old)) > 50  # every kind: counters, per-rule counters, histogram, gauges, each


def test_a_label_value_with_quotes_and_a_newline_is_escaped() -> None:
    text = one_bridge().render()
    assert 'hookbridge_broker_refused_total{reason="odd \\"reason\\"\\n"} 1.0' in text


def test_each_worker_sample_is_labelled_and_sums_are_added() -> None:
    found = samples(render_families(two_workers()))
    assert ("hookbridge_pool_up", (("pool", "redis.pool1"), ("worker", "1")), 1.0) in found
    matched = (("pool", "redis.pool1"), ("rule", "redis.message.publish.1"))
    assert ("hookbridge_rule_matched_total", matched, 17.0) in found  # 7 + 7 + 3
