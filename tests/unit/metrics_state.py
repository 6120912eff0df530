"""A fixed state of every kind of family the bridge exports, for tests/unit/test_metrics_exposition.py.

`before_*.txt` in tests/unit/metrics_before/ is what the hand-written renderer (bridge/ops/metrics.py before
prometheus_client) printed for this state; the test compares the new exposition against it."""

from __future__ import annotations

from bridge.ops.metrics import Family, Metrics, Sample
from bridge.workers.merge import merge_families


def one_bridge() -> Metrics:
    metrics = Metrics()
    metrics.events["message.publish"] = 7
    metrics.events["client.connected"] = 2
    metrics.count("redis.message.publish.1", "matched", 7)
    metrics.count("redis.message.publish.1", "succeeded", 6)
    metrics.count("redis.message.publish.1", "failed")
    metrics.count("pgsql.client.connected.1", "matched", 2)
    metrics.count("pgsql.client.connected.1", "deadlettered")
    metrics.rule_pool.update({"redis.message.publish.1": "redis.pool1", "pgsql.client.connected.1": "pgsql.pool1"})
    for seconds in (0.0004, 0.003, 0.2, 12.0):
        metrics.write_latency["redis.pool1"].observe(seconds)
    metrics.write_latency["pgsql.pool1"].observe(0.05)
    metrics.spool_problems["redis.pool1"] = 1
    metrics.gauge(
        "hookbridge_queue_depth", "Actions waiting, per pool", lambda: {"redis.pool1": 3.0, "pgsql.pool1": 0.0}
    )
    metrics.gauge(
        "hookbridge_pool_up", "1 when the pool's last write worked", lambda: {"redis.pool1": 1.0}, merge="each"
    )
    metrics.gauge(
        "hookbridge_spool_bytes", "Bytes of spooled actions on disk, per pool", lambda: {"redis.pool1": 4096.0}
    )
    metrics.counter(
        "hookbridge_broker_refused_total",
        'Refused, by reason (a "quoted" help)',
        lambda: {"acl": 2.0, 'odd "reason"\n': 1.0},
        label="reason",
    )
    return metrics


def two_workers() -> list[Family]:
    first, second = one_bridge(), one_bridge()
    second.count("redis.message.publish.1", "matched", 3)
    own = Family("hookbridge_workers", "gauge", "Worker processes configured (run --workers N)")
    own.samples = [Sample(own.name, {}, 2)]
    return [*merge_families({0: first.families(), 1: second.families()}), own]
