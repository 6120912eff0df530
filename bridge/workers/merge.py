"""One /metrics and one /healthz for N workers.

Each family says how its workers' values combine (bridge/ops/metrics.py `Merge`): "sum" adds the
samples with the same name and labels (counters, histograms, and gauges whose total means
something: queue depth, spool bytes, messages in flight), "each" keeps every worker's sample with
a `worker` label added (1 when a pool is up: a sum of those says nothing).
"""

from __future__ import annotations

from typing import Any

from bridge.ops.metrics import Family, Sample


def merge_families(per_worker: dict[int, list[Family]], carried: list[Family] | None = None) -> list[Family]:
    """The workers' families combined, in the order the first worker that has each lists them.

    `carried`: counts of earlier runs of restarted workers (see `counts_only`), added to the sums
    so that a counter does not go back when a worker restarts from zero."""
    merged: dict[str, Family] = {}
    sums: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Sample]] = {}
    sources = [(str(worker), families) for worker, families in sorted(per_worker.items())]
    for worker, families in [*sources, ("carried", carried or [])]:
        for family in families:
            into = merged.setdefault(family.name, Family(family.name, family.kind, family.help_text, family.merge))
            if into.merge == "each":
                into.samples += [Sample(s.name, {**s.labels, "worker": worker}, s.value) for s in family.samples]
                continue
            seen = sums.setdefault(family.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if key in seen:
                    seen[key].value += sample.value
                else:
                    seen[key] = Sample(sample.name, dict(sample.labels), sample.value)
                    into.samples.append(seen[key])
    return list(merged.values())


def counts_only(families: list[Family]) -> list[Family]:
    """The counters and histograms of `families`: what a worker counted, to carry over its restart."""
    return [f for f in families if f.kind in ("counter", "histogram") and f.merge == "sum"]


def combined_health(workers: dict[int, dict[str, Any]]) -> tuple[bool, dict[str, Any]]:
    """Ready only when every worker is running and says it is ready (one that is retiring is
    leaving the set and counts no more); each worker's state shown."""
    staying = [state for state in workers.values() if state.get("state") != "retiring"]
    ready = bool(staying) and all(state.get("ready") is True for state in staying)
    return ready, {"ready": ready, "workers": {str(i): state for i, state in sorted(workers.items())}}
