"""The sessions report (docs/reports.md#sessions): sessions, online clients over time, reconnect storms, nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_analytics import charts
from spark_analytics.extract import event_log
from spark_analytics.jobs.common import aware, human, meta, rows
from spark_analytics.page import Page
from spark_analytics.transforms import sessions as T

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_analytics.options import Options
    from spark_analytics.sources import Source

NAME = "sessions"
NEEDED = ("event_log",)


def extract(spark: SparkSession, source: Source, options: Options) -> dict[str, DataFrame]:
    events = (T.CONNECTED, T.DISCONNECTED)
    return {"events": event_log(spark, source, options.window, events, _partitions(spark, options))}


def transform(frames: dict[str, DataFrame], options: Options) -> dict[str, DataFrame]:
    from pyspark import StorageLevel

    window = options.window
    # Every table below starts from the stitched sessions: stitch once (a window function per client).
    stitched = T.sessions(frames["events"], window.start, window.end).persist(StorageLevel.MEMORY_AND_DISK)
    return {
        "sessions": stitched.orderBy("start", "clientid"),
        "online": T.online(stitched, window.start, window.end, options.bucket),
        "storms": T.storms(stitched, options.storm_threshold),
        "nodes": T.nodes(stitched),
        "reasons": T.reasons(stitched),
        "durations": T.durations(stitched),
    }


def page(tables: dict[str, DataFrame], source: Source, options: Options) -> str:
    sessions = tables["sessions"]
    online = rows(tables["online"], 100_000)
    nodes = rows(tables["nodes"], 1000)
    storms_count = tables["storms"].count()
    total = sessions.count()
    report = Page("Sessions", meta(source, options))
    report.figures = [
        ("sessions", f"{total:,}"),
        ("clients", f"{sessions.select('clientid').distinct().count():,}"),
        ("open at window end", f"{sessions.filter('open').count():,}"),
        ("peak online", f"{max((r[1] for r in online), default=0):,}"),
        (f"reconnect storms (> {options.storm_threshold}/h)", f"{storms_count:,}"),
    ]
    report.heading("Online clients")
    report.chart(
        charts.line(
            f"Clients online (end of each {human(options.bucket)} bucket)", [(aware(r[0]), float(r[1])) for r in online]
        )
    )
    report.heading("Nodes")
    report.chart(charts.bars("Sessions per node", [(str(r[0]), float(r[1])) for r in nodes]))
    report.table("nodes", tables["nodes"].columns, nodes)
    report.heading("How sessions end and how long they last")
    durations = rows(tables["durations"], 100)
    report.chart(charts.bars("Session length", [(str(r[0]), float(r[2])) for r in durations], charts.ACCENT))
    report.table("reasons", tables["reasons"].columns, rows(tables["reasons"], options.top))
    report.heading("Reconnect storms")
    report.table("storms", tables["storms"].columns, rows(tables["storms"], options.top), storms_count)
    report.heading("Sessions")
    longest = sessions.orderBy(sessions.duration_s.desc())
    report.table("longest sessions", sessions.columns, rows(longest, options.top), total)
    return report.render()


def _partitions(spark: SparkSession, options: Options) -> int:
    return options.partitions or spark.sparkContext.defaultParallelism
