"""What only hookbridge has in `$SYS`: its pools, spool and rules, under `$SYS/broker/hookbridge/`.

The broker publishes these beside Mosquitto's topics (systopics.py), every `broker.sys_interval`,
with the same numbers /healthz and /metrics show, so an MQTT-only dashboard sees the bridge too.
Topic names are relative to `$SYS/broker/hookbridge/`; values are text, as every `$SYS` value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.ops.metrics import RULE_COUNTERS

if TYPE_CHECKING:
    from bridge.ops.metrics import Metrics
    from bridge.pipeline.engine import Engine
    from bridge.pipeline.runner import Runner
    from bridge.pipeline.spool.budget import Budget


def bridge_status(runners: dict[str, Runner], spool: Budget, engine: Engine, metrics: Metrics) -> dict[str, str]:
    """`pools/<pool>/{up,queue,spooled}`, `spool/{bytes,max_bytes}`, `rules/count`,
    `rules/<counter>` (summed over the rules) and `events/received`: of the bridge's runners (by
    pool id), spool budget, rule engine and metrics now (app.py passes them at each interval)."""
    values: dict[str, int] = {}
    for pool_id, runner in sorted(runners.items()):
        values[f"pools/{pool_id}/up"] = int(runner.healthy)
        values[f"pools/{pool_id}/queue"] = runner.depth
        values[f"pools/{pool_id}/spooled"] = runner.spool.pending if runner.spool else 0
    values["spool/bytes"] = spool.used
    values["spool/max_bytes"] = spool.max_bytes
    rules = metrics.rules
    values["rules/count"] = len(engine.rules)
    for counter in RULE_COUNTERS:
        values[f"rules/{counter}"] = sum(counts.get(counter, 0) for counts in rules.values())
    values["events/received"] = sum(metrics.events.values())
    return {name: str(value) for name, value in values.items()}
