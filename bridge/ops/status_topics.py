"""What only hookbridge has in `$SYS`: its pools, spool and rules, under `$SYS/broker/hookbridge/`.

The broker publishes these beside Mosquitto's topics (systopics.py), every `broker.sys_interval`,
with the same numbers /healthz and /metrics show, so an MQTT-only dashboard sees the bridge too.
Topic names are relative to `$SYS/broker/hookbridge/`; values are text, as every `$SYS` value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bridge.ops.metrics import RULE_COUNTERS

if TYPE_CHECKING:
    from bridge.app import Bridge


def bridge_status(bridge: Bridge) -> dict[str, str]:
    """`pools/<pool>/{up,queue,spooled}`, `spool/{bytes,max_bytes}`, `rules/count`,
    `rules/<counter>` (summed over the rules) and `events/received`."""
    values: dict[str, int] = {}
    for pool_id, runner in sorted(bridge.runners.items()):
        values[f"pools/{pool_id}/up"] = int(runner.healthy)
        values[f"pools/{pool_id}/queue"] = runner.depth
        values[f"pools/{pool_id}/spooled"] = runner.spool.pending if runner.spool else 0
    values["spool/bytes"] = bridge.spool_budget.used
    values["spool/max_bytes"] = bridge.spool_budget.max_bytes
    rules = bridge.metrics.rules
    values["rules/count"] = len(bridge.engine.rules)
    for counter in RULE_COUNTERS:
        values[f"rules/{counter}"] = sum(counts.get(counter, 0) for counts in rules.values())
    values["events/received"] = sum(bridge.metrics.events.values())
    return {name: str(value) for name, value in values.items()}
