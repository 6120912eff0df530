"""Counters, gauges and histograms, rendered as Prometheus text."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

RULE_COUNTERS = ("matched", "succeeded", "failed", "retried", "spooled", "dropped")
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _labels(**labels: str) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


class Histogram:
    def __init__(self, buckets: tuple[float, ...] = _LATENCY_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.n += 1

    def render(self, name: str, **labels: str) -> list[str]:
        lines, running = [], 0
        for bound, count in zip((*self.buckets, float("inf")), self.counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            lines.append(f"{name}_bucket{_labels(**labels, le=le)} {running}")
        lines.append(f"{name}_sum{_labels(**labels)} {self.total}")
        lines.append(f"{name}_count{_labels(**labels)} {self.n}")
        return lines


@dataclass(frozen=True, slots=True)
class ReadAtScrape:
    """A family whose numbers another object keeps (a runner, the broker), read at each scrape."""

    help_text: str
    read: Callable[[], Mapping[str, float]]  # {label value: number}
    label: str = "pool"
    kind: str = "gauge"  # or "counter": a number that only grows


class Metrics:
    """All the bridge's numbers. Gauges are callables read at scrape time."""

    def __init__(self) -> None:
        self.rules: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(RULE_COUNTERS, 0))
        self.rule_pool: dict[str, str] = {}
        self.write_latency: dict[str, Histogram] = defaultdict(Histogram)
        self.gauges: dict[str, ReadAtScrape] = {}
        self.events: dict[str, int] = defaultdict(int)
        self.spool_problems: dict[str, int] = defaultdict(int)  # torn tails, undecodable records, per pool

    def count(self, rule_id: str, counter: str, n: int = 1) -> None:
        self.rules[rule_id][counter] += n

    def gauge(self, name: str, help_text: str, read: Callable[[], Mapping[str, float]], *, label: str = "pool") -> None:
        """Register a gauge family; `read` returns {label value: number} keyed by pool/state."""
        self.gauges[name] = ReadAtScrape(help_text, read, label)

    def counter(self, name: str, help_text: str, read: Callable[[], Mapping[str, float]], *, label: str) -> None:
        """Register a counter family kept elsewhere; `read` returns {label value: count so far}."""
        self.gauges[name] = ReadAtScrape(help_text, read, label, kind="counter")

    def render(self) -> str:
        lines = [
            "# HELP hookbridge_events_total Events received from the broker, per hookpoint",
            "# TYPE hookbridge_events_total counter",
        ]
        lines += [f"hookbridge_events_total{_labels(hookpoint=h)} {n}" for h, n in sorted(self.events.items())]
        for counter in RULE_COUNTERS:
            name = f"hookbridge_rule_{counter}_total"
            lines += [f"# HELP {name} Actions {counter}, per rule", f"# TYPE {name} counter"]
            for rule_id, counts in sorted(self.rules.items()):
                pool = self.rule_pool.get(rule_id, "")
                lines.append(f"{name}{_labels(rule=rule_id, pool=pool)} {counts[counter]}")
        lines += [
            "# HELP hookbridge_write_seconds Batch write latency, per pool",
            "# TYPE hookbridge_write_seconds histogram",
        ]
        for pool, histogram in sorted(self.write_latency.items()):
            lines += histogram.render("hookbridge_write_seconds", pool=pool)
        lines += [
            "# HELP hookbridge_spool_problems_total Torn or unreadable spool records skipped, per pool",
            "# TYPE hookbridge_spool_problems_total counter",
        ]
        lines += [
            f"hookbridge_spool_problems_total{_labels(pool=p)} {n}" for p, n in sorted(self.spool_problems.items())
        ]
        for name, family in sorted(self.gauges.items()):
            lines += [f"# HELP {name} {family.help_text}", f"# TYPE {name} {family.kind}"]
            lines += [f"{name}{_labels(**{family.label: key})} {value}" for key, value in sorted(family.read().items())]
        return "\n".join(lines) + "\n"
