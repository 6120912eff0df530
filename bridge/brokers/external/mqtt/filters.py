"""Which filters the bridge subscribes to, from the rules' topic filters.

A broker may send one copy of a message per matching subscription (MQTT 5
allows it, Mosquitto does it), and each copy would be a separate publish event
with its own msgid. So the set is reduced until no two filters can match the
same topic: filters covered by another one are dropped, and when two remaining
filters still overlap (`a/+` and `+/b` both match `a/b`) the bridge subscribes
to `#` instead; the rule engine filters by topic anyway.

A filter whose first level is a wildcard never matches a topic starting with
`$` ([MQTT-4.7.2-1]): `#` does not cover `$SYS/broker/log/N`, so a subscription
to it is still needed beside `#`.
"""

from __future__ import annotations

from collections.abc import Iterable


def _wildcard_first(levels: list[str]) -> bool:
    return levels[0] in ("+", "#")


def _dollar_first(levels: list[str]) -> bool:
    """Every topic the filter matches starts with `$` (its first level is a literal `$...`)."""
    return levels[0].startswith("$")


def covers(a: str, b: str) -> bool:
    """Every topic matching filter `b` also matches filter `a`."""
    la, lb = a.split("/"), b.split("/")
    if _wildcard_first(la) and _dollar_first(lb):
        return False
    for i, level in enumerate(la):
        if level == "#":
            return True
        if i < len(lb) and lb[i] == "#":
            # `+/#` matches every topic `#` does (a topic has at least one level); deeper, `x/+/#`
            # misses the `x` that `x/#` matches.
            return i == 0 and la == ["+", "#"]
        if i >= len(lb):
            return False
        if level != "+" and (lb[i] == "+" or lb[i] != level):
            return False
    return len(la) == len(lb)


def overlap(a: str, b: str) -> bool:
    """Some topic matches both filters."""
    la, lb = a.split("/"), b.split("/")
    if (_wildcard_first(la) and _dollar_first(lb)) or (_wildcard_first(lb) and _dollar_first(la)):
        return False
    for x, y in zip(la, lb, strict=False):
        if x == "#" or y == "#":
            return True
        if x != "+" and y != "+" and x != y:
            return False
    # `a/#` also matches `a` ([MQTT-4.7.1-2]): the longer filter may end in one extra `#` level.
    rest = la[len(lb) :] or lb[len(la) :]
    return rest in ([], ["#"])


def subscription_filters(wanted: Iterable[str | None]) -> list[str]:
    """The filters to subscribe to (`None`: a rule without a topic, i.e. every topic)."""
    filters = sorted({"#" if f is None else f for f in wanted})
    kept = [f for f in filters if not any(g != f and covers(g, f) for g in filters)]
    if any(overlap(a, b) for i, a in enumerate(kept) for b in kept[i + 1 :]):
        return ["#"]
    return kept
