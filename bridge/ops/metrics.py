"""Counters, gauges and histograms, exposed as Prometheus text through prometheus_client.

`Metrics.families()` gives every number as plain data (JSON-safe) before it becomes text, so
that `hookbridge run --workers N` can add up its workers' numbers (bridge/workers/merge.py) and
print them with the same `render_families`: a prometheus_client Collector that yields the
families given (the merged ones under `--workers N`), rendered by `generate_latest`.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

RULE_COUNTERS = ("matched", "succeeded", "failed", "retried", "spooled", "dropped")
# Exported from 0 like the others, but held in a rule's counts only once it happened (most rules
# never fail for good): actions kept in the dead-letter store (bridge/pipeline/deadletter.py).
RARE_RULE_COUNTERS = ("deadlettered",)
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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

    def samples(self, name: str, **labels: str) -> list[Sample]:
        samples, running = [], 0
        for bound, count in zip((*self.buckets, float("inf")), self.counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            samples.append(Sample(f"{name}_bucket", {**labels, "le": le}, running))
        samples.append(Sample(f"{name}_sum", labels, self.total))
        samples.append(Sample(f"{name}_count", labels, self.n))
        return samples


# How several workers' values of one family combine (bridge/workers/merge.py): "sum" adds the
# samples with the same name and labels (counters, histograms, and gauges whose total means
# something, such as queue depth); "each" keeps one sample per worker, labelled `worker`, where
# a sum means nothing (1 when the pool is up).
Merge = Literal["sum", "each"]


@dataclass(slots=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(slots=True)
class Family:
    """One metric: its HELP and TYPE, how workers' values combine, and its samples."""

    name: str
    kind: str  # counter | gauge | histogram
    help_text: str
    merge: Merge = "sum"
    samples: list[Sample] = field(default_factory=list)


class FamiliesCollector(Collector):
    """A prometheus_client Collector of `families`, in the order given (read once, at construction)."""

    def __init__(self, families: list[Family]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            # Every counter's name ends in `_total`, which prometheus_client adds back when it prints
            name = family.name.removesuffix("_total") if family.kind == "counter" else family.name
            metric = Metric(name, family.help_text, family.kind)
            for sample in family.samples:
                metric.add_sample(sample.name, dict(sample.labels), sample.value)
            yield metric


def render_families(families: list[Family]) -> str:
    """Prometheus text exposition (version 0.0.4) of `families`, in the order given."""
    return generate_latest(FamiliesCollector(families)).decode()


@dataclass(frozen=True, slots=True)
class ReadAtScrape:
    """A family whose numbers another object keeps (a runner, the broker), read at each scrape."""

    help_text: str
    read: Callable[[], Mapping[str, float]]  # {label value: number}
    label: str = "pool"  # "": no label (one sample, under any key)
    kind: str = "gauge"  # or "counter": a number that only grows
    merge: Merge = "sum"


class Metrics:
    """All the bridge's numbers. Gauges are callables read at scrape time."""

    def __init__(self) -> None:
        self.rules: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(RULE_COUNTERS, 0))
        self.rule_pool: dict[str, str] = {}
        self.write_latency: dict[str, Histogram] = defaultdict(Histogram)
        self.gauges: dict[str, ReadAtScrape] = {}
        self.events: dict[str, int] = defaultdict(int)
        self.spool_problems: dict[str, int] = defaultdict(int)  # torn tails, undecodable records, per pool
        self._refreshers: list[Callable[[], None]] = []
        self._awaited_refreshers: list[Callable[[], Awaitable[None]]] = []

    def count(self, rule_id: str, counter: str, n: int = 1) -> None:
        counts = self.rules[rule_id]
        counts[counter] = counts.get(counter, 0) + n

    def gauge(
        self,
        name: str,
        help_text: str,
        read: Callable[[], Mapping[str, float]],
        *,
        label: str = "pool",
        merge: Merge = "sum",
    ) -> None:
        """Register a gauge family; `read` returns {label value: number} keyed by pool/state.

        `merge`: how the workers' values combine under `--workers N` ("each" where a sum means nothing)."""
        self.gauges[name] = ReadAtScrape(help_text, read, label, merge=merge)

    def counter(self, name: str, help_text: str, read: Callable[[], Mapping[str, float]], *, label: str) -> None:
        """Register a counter family kept elsewhere; `read` returns {label value: count so far}."""
        self.gauges[name] = ReadAtScrape(help_text, read, label, kind="counter")

    def before_scrape(self, refresh: Callable[[], None]) -> None:
        """Call `refresh` once at the start of every scrape: for families read from one costly
        snapshot (the broker's numbers, bridge/ops/broker_metrics.py) taken once, not per family."""
        self._refreshers.append(refresh)

    def before_scrape_awaited(self, refresh: Callable[[], Awaitable[None]]) -> None:
        """As before_scrape, for a snapshot taken over several loop turns (the embedded broker's
        census of a big fleet, census.py): awaited by `fresh_families` before the sync refreshers."""
        self._awaited_refreshers.append(refresh)

    async def fresh_families(self) -> list[Family]:
        """`families()` after the awaited refreshers: what /metrics serves."""
        for refresh in self._awaited_refreshers:
            await refresh()
        return self.families()

    async def render_fresh(self) -> str:
        return render_families(await self.fresh_families())

    def families(self) -> list[Family]:
        """Every metric with its samples, read now."""
        for refresh in self._refreshers:
            refresh()
        events = Family("hookbridge_events_total", "counter", "Events received from the broker, per hookpoint")
        events.samples = [Sample(events.name, {"hookpoint": h}, n) for h, n in sorted(self.events.items())]
        families = [events]
        for counter in (*RULE_COUNTERS, *RARE_RULE_COUNTERS):
            family = Family(f"hookbridge_rule_{counter}_total", "counter", f"Actions {counter}, per rule")
            for rule_id, counts in sorted(self.rules.items()):
                labels = {"rule": rule_id, "pool": self.rule_pool.get(rule_id, "")}
                family.samples.append(Sample(family.name, labels, counts.get(counter, 0)))
            families.append(family)
        latency = Family("hookbridge_write_seconds", "histogram", "Batch write latency, per pool")
        for pool, histogram in sorted(self.write_latency.items()):
            latency.samples += histogram.samples(latency.name, pool=pool)
        problems = Family(
            "hookbridge_spool_problems_total", "counter", "Torn or unreadable spool records skipped, per pool"
        )
        problems.samples = [Sample(problems.name, {"pool": p}, n) for p, n in sorted(self.spool_problems.items())]
        families += [latency, problems]
        for name, read in sorted(self.gauges.items()):
            family = Family(name, read.kind, read.help_text, read.merge)
            family.samples = [
                Sample(name, {read.label: key} if read.label else {}, value)
                for key, value in sorted(read.read().items())
            ]
            families.append(family)
        return families

    def render(self) -> str:
        return render_families(self.families())
