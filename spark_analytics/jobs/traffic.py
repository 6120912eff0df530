"""The traffic report (docs/reports.md#traffic): per topic, prefix, publisher and time; QoS and retained mix;
delivery and ack latency; per-subscriber backlog from the pubsub offsets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_analytics import charts
from spark_analytics.extract import event_log, messages, offsets
from spark_analytics.jobs.common import aware, human, meta, rows
from spark_analytics.page import Page
from spark_analytics.transforms import traffic as T

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_analytics.options import Options
    from spark_analytics.sources import Source

NAME = "traffic"
NEEDED = ("event_log", "msg", "acked")


def extract(spark: SparkSession, source: Source, options: Options) -> dict[str, DataFrame]:
    window = options.window
    parts = options.partitions or spark.sparkContext.defaultParallelism
    return {
        "events": event_log(spark, source, window, (T.PUBLISH, T.DELIVERED, T.ACKED), parts),
        # the retained mix: messages stored in the window
        "stored": messages(spark, source, window.start, window.end, parts),
        # the backlog: everything still stored at the window's end, whenever it arrived
        "pending": messages(spark, source, None, window.end, parts),
        "offsets": offsets(spark, source),
    }


def transform(frames: dict[str, DataFrame], options: Options) -> dict[str, DataFrame]:
    window = options.window
    events = frames["events"]
    from pyspark import StorageLevel

    # The publish-receipt join feeds two tables: joined once.
    latency_rows = T.latencies(events).persist(StorageLevel.MEMORY_AND_DISK)
    return {
        "traffic_by_topic": T.by_topic(events),
        "traffic_by_prefix": T.by_prefix(events, options.prefix_depth),
        "traffic_by_publisher": T.by_publisher(events),
        "traffic_by_time": T.by_time(events, window.start, window.end, options.bucket),
        "qos_mix": T.qos_mix(events),
        "retain_mix": T.retain_mix(frames["stored"]),
        "latency": T.latency_percentiles(latency_rows),
        "latency_histogram": T.latency_histogram(latency_rows),
        "backlog": T.backlog(frames["offsets"], frames["pending"]),
    }


def page(tables: dict[str, DataFrame], source: Source, options: Options) -> str:
    by_topic = tables["traffic_by_topic"]
    topics = rows(by_topic, options.top)
    over_time = rows(tables["traffic_by_time"], 100_000)
    latency = rows(tables["latency"], 10)
    histogram = rows(tables["latency_histogram"], 1000)
    totals = by_topic.groupBy().sum("messages", "bytes").first()
    messages_total, bytes_total = (totals[0] or 0, totals[1] or 0) if totals else (0, 0)
    report = Page("Traffic", meta(source, options))
    p50 = {r[0]: r[2] for r in latency}
    report.figures = [
        ("messages", f"{messages_total:,}"),
        ("payload bytes", f"{bytes_total:,}"),
        ("topics", f"{by_topic.count():,}"),
        ("publishers", f"{tables['traffic_by_publisher'].count():,}"),
        ("delivery p50", f"{p50['delivered']:.1f} ms" if p50.get("delivered") is not None else "-"),
        ("ack p50", f"{p50['acked']:.1f} ms" if p50.get("acked") is not None else "-"),
    ]
    report.heading("Messages over time")
    report.chart(charts.line(f"Messages per {human(options.bucket)}", [(aware(r[0]), float(r[1])) for r in over_time]))
    report.heading("Topics")
    report.chart(charts.bars(f"Messages per topic (top {options.top})", [(str(r[0]), float(r[1])) for r in topics]))
    report.table("traffic_by_topic", by_topic.columns, topics, by_topic.count())
    prefixes = tables["traffic_by_prefix"]
    report.table(
        f"traffic_by_prefix (depth {options.prefix_depth})",
        prefixes.columns,
        rows(prefixes, options.top),
        prefixes.count(),
    )
    publishers = tables["traffic_by_publisher"]
    report.table("traffic_by_publisher", publishers.columns, rows(publishers, options.top), publishers.count())
    report.heading("Latency")
    for kind in ("delivered", "acked"):
        label = "publish to delivered" if kind == "delivered" else "publish to acked"
        report.chart(
            charts.bars(
                f"Latency, {label} (ms, bucket upper bound)",
                [(_edge(r[1]), float(r[2])) for r in histogram if r[0] == kind],
                charts.ACCENT if kind == "acked" else charts.COLOR,
            )
        )
    report.table("latency percentiles (ms)", tables["latency"].columns, latency)
    report.heading("QoS and retained mix")
    report.table("qos_mix", tables["qos_mix"].columns, rows(tables["qos_mix"], 10))
    report.table("retain_mix (stored messages)", tables["retain_mix"].columns, rows(tables["retain_mix"], 10))
    report.heading("Backlog per subscriber")
    backlog = tables["backlog"]
    report.table("backlog", backlog.columns, rows(backlog, options.top), backlog.count())
    return report.render()


def _edge(upper: float | None) -> str:
    return "more" if upper is None else f"< {upper:g}"
