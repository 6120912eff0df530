"""The sessions report's transforms, over event-log rows (`client.connected` / `client.disconnected`).

Stitching rules (per client, events ordered by time, a connect before a disconnect at the same instant):

- connected, then disconnected: one session, ended with the disconnect's reason;
- connected, then connected again (the disconnect was never logged: a crashed node, a lost event):
  the first session ends where the second starts, reason `missing_disconnect`;
- connected, and nothing after it in the window: an open session, `end` null, its duration counted
  to the window's end;
- a disconnect that is the client's first event in the window: the session began before the
  window; it starts at the window's start, `clipped` true;
- a disconnect right after another disconnect: a duplicate, ignored.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

CONNECTED = "client.connected"
DISCONNECTED = "client.disconnected"
MISSING_DISCONNECT = "missing_disconnect"

SESSION_COLUMNS = ("clientid", "node", "start", "end", "duration_s", "reason", "open", "clipped")


def _seconds(later: Column, earlier: Column) -> Column:
    """Exact seconds between two timestamps (microseconds kept, unlike unix_timestamp)."""
    return (F.unix_micros(later) - F.unix_micros(earlier)) / F.lit(1_000_000.0)


def sessions(events: DataFrame, start: dt.datetime, end: dt.datetime) -> DataFrame:
    """One row per session touching [start, end): SESSION_COLUMNS."""
    lifecycle = events.filter(F.col("event").isin(CONNECTED, DISCONNECTED)).select(
        "clientid", "node", "event", "ts", "reason", F.when(F.col("event") == CONNECTED, 0).otherwise(1).alias("rank")
    )
    order = Window.partitionBy("clientid").orderBy("ts", "rank")
    steps = lifecycle.select(
        "*",
        F.lead("event").over(order).alias("next_event"),
        F.lead("ts").over(order).alias("next_ts"),
        F.lead("reason").over(order).alias("next_reason"),
        F.lag("event").over(order).alias("prev_event"),
    )
    window_end = F.lit(end)
    from_connects = steps.filter(F.col("event") == CONNECTED).select(
        "clientid",
        "node",
        F.col("ts").alias("start"),
        F.col("next_ts").alias("end"),
        F.when(F.col("next_event") == DISCONNECTED, F.col("next_reason"))
        .when(F.col("next_event") == CONNECTED, F.lit(MISSING_DISCONNECT))
        .alias("reason"),
        F.col("next_event").isNull().alias("open"),
        F.lit(False).alias("clipped"),
    )
    clipped = steps.filter((F.col("event") == DISCONNECTED) & F.col("prev_event").isNull()).select(
        "clientid",
        "node",
        F.lit(start).alias("start"),
        F.col("ts").alias("end"),
        F.col("reason"),
        F.lit(False).alias("open"),
        F.lit(True).alias("clipped"),
    )
    stitched = from_connects.unionByName(clipped)
    duration = _seconds(F.coalesce(F.col("end"), window_end), F.col("start"))
    return stitched.withColumn("duration_s", duration).select(*SESSION_COLUMNS)


def online(sessions_df: DataFrame, start: dt.datetime, end: dt.datetime, bucket_s: int) -> DataFrame:
    """Clients online at the end of each bucket (bucket, online, connects, disconnects), every bucket.

    Counted from +1 at each session start and -1 at each end, summed per bucket, then a running sum
    over the buckets: linear in sessions, never sessions x buckets.
    """
    spark = sessions_df.sparkSession
    first = int(start.timestamp())
    count = max(1, -(-int((end - start).total_seconds()) // bucket_s))

    def bucket_of(column: str) -> Column:
        return F.floor((F.unix_micros(F.col(column)) / 1_000_000 - first) / bucket_s).cast("long")

    ups = sessions_df.select(bucket_of("start").alias("n"), F.lit(1).alias("up"), F.lit(0).alias("down"))
    downs = sessions_df.filter(F.col("end").isNotNull()).select(
        bucket_of("end").alias("n"), F.lit(0).alias("up"), F.lit(1).alias("down")
    )
    per_bucket = (
        ups.unionByName(downs).groupBy("n").agg(F.sum("up").alias("connects"), F.sum("down").alias("disconnects"))
    )
    buckets = spark.range(count).withColumnRenamed("id", "n")
    filled = buckets.join(per_bucket, "n", "left").fillna(0, ["connects", "disconnects"])
    running = Window.orderBy("n").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return filled.select(
        F.timestamp_seconds(F.lit(first) + F.col("n") * bucket_s).alias("bucket"),
        F.sum(F.col("connects") - F.col("disconnects")).over(running).cast("long").alias("online"),
        F.col("connects").cast("long").alias("connects"),
        F.col("disconnects").cast("long").alias("disconnects"),
    ).orderBy("bucket")


def storms(sessions_df: DataFrame, threshold: int) -> DataFrame:
    """Clients that connected more than `threshold` times within one clock hour (clientid, hour, connects)."""
    connects = sessions_df.filter(~F.col("clipped"))
    per_hour = connects.groupBy("clientid", F.date_trunc("hour", "start").alias("hour")).agg(
        F.count("*").alias("connects")
    )
    return per_hour.filter(F.col("connects") > threshold).orderBy(F.desc("connects"), "clientid", "hour")


def nodes(sessions_df: DataFrame) -> DataFrame:
    """Per node: sessions, distinct clients, sessions still open, mean and total duration."""
    return (
        sessions_df.groupBy("node")
        .agg(
            F.count("*").alias("sessions"),
            F.countDistinct("clientid").alias("clients"),
            F.sum(F.col("open").cast("int")).alias("open"),
            F.avg("duration_s").alias("avg_duration_s"),
            F.sum("duration_s").alias("total_duration_s"),
        )
        .orderBy(F.desc("sessions"), "node")
    )


def reasons(sessions_df: DataFrame) -> DataFrame:
    """Why sessions ended (open sessions excluded): reason, sessions."""
    ended = sessions_df.filter(~F.col("open"))
    return (
        ended.groupBy(F.coalesce("reason", F.lit("unknown")).alias("reason"))
        .agg(F.count("*").alias("sessions"))
        .orderBy(F.desc("sessions"), "reason")
    )


def durations(sessions_df: DataFrame) -> DataFrame:
    """Session length histogram on a log scale (bucket label, upper bound in seconds, sessions)."""
    edges = [(10, "<10s"), (60, "10s-1m"), (600, "1-10m"), (3600, "10m-1h"), (6 * 3600, "1-6h"), (86400, "6-24h")]
    label = F.lit(">24h")
    upper = F.lit(None).cast("double")
    for bound, name in reversed(edges):
        label = F.when(F.col("duration_s") < bound, F.lit(name)).otherwise(label)
        upper = F.when(F.col("duration_s") < bound, F.lit(float(bound))).otherwise(upper)
    return (
        sessions_df.groupBy(label.alias("length"), upper.alias("upper_s"))
        .agg(F.count("*").alias("sessions"))
        .orderBy(F.col("upper_s").asc_nulls_last())
    )
