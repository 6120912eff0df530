"""The mqtt / emqx modes' subscription reduction (bridge/brokers/external/mqtt/filters.py) agrees with MQTT matching.

`covers` and `overlap` are checked against `bridge.topics.matches` on every filter and topic over a
small alphabet: `$s` stands for a `$SYS`-like first level, which wildcards at the start never match.
"""

from __future__ import annotations

import itertools

from bridge.brokers.external.mqtt.filters import covers, overlap, subscription_filters
from bridge.topics import matches

TOPIC_LEVELS = ("a", "b", "$s")
FILTER_LEVELS = ("a", "$s", "+", "#")


def _topics() -> list[str]:
    return ["/".join(p) for n in range(1, 5) for p in itertools.product(TOPIC_LEVELS, repeat=n)]


def _filters() -> list[str]:
    out = []
    for n in range(1, 4):
        for levels in itertools.product(FILTER_LEVELS, repeat=n):
            if "#" not in levels[:-1]:  # `#` only as the last level
                out.append("/".join(levels))
    return out


TOPICS = _topics()
FILTERS = _filters()
MATCHED = {f: {t for t in TOPICS if matches(f, t)} for f in FILTERS}


def test_covers_is_exactly_subset_of_matched_topics() -> None:
    wrong = [(a, b) for a in FILTERS for b in FILTERS if covers(a, b) != (MATCHED[b] <= MATCHED[a])]
    assert wrong == []


def test_overlap_is_exactly_a_shared_matched_topic() -> None:
    wrong = [(a, b) for a in FILTERS for b in FILTERS if overlap(a, b) != bool(MATCHED[a] & MATCHED[b])]
    assert wrong == []


def test_a_wildcard_rule_filter_keeps_the_dollar_subscriptions_beside_it() -> None:
    # `#` never brings `$SYS/...` messages ([MQTT-4.7.2-1]): the log topics stay subscribed.
    assert not covers("#", "$SYS/broker/log/N")
    assert not covers("+/broker/log/N", "$SYS/broker/log/N")
    assert covers("$SYS/#", "$SYS/broker/log/N")
    assert subscription_filters(["#", "$SYS/broker/log/N"]) == ["#", "$SYS/broker/log/N"]
    assert subscription_filters(["+/x", "$SYS/x"]) == ["$SYS/x", "+/x"]


def test_a_parent_level_and_its_multi_level_wildcard_overlap() -> None:
    # `a/#` also matches `a` ([MQTT-4.7.1-2]): subscribing to both would bring `a` twice.
    assert overlap("a/#", "a") and overlap("a", "a/#")
    assert subscription_filters(["a", "a/#"]) == ["a/#"]
    assert subscription_filters(["a/+", "a/+/#"]) == ["a/+/#"]
