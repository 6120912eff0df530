"""The traffic report's transforms, over event-log rows, stored messages and pubsub offsets.

Publishes are counted from the event log's `message.publish` rows (every QoS; `bytes` is the payload
size); deliveries and acks from its `message.delivered` / `message.acked` rows, joined to their
publish by msgid for the latencies. The retained mix comes from the stored messages (the event log
has no retain flag), the backlog from the offsets against the stored messages.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

PUBLISH = "message.publish"
DELIVERED = "message.delivered"
ACKED = "message.acked"
PERCENTILES = (0.5, 0.9, 0.95, 0.99)
# percentile_approx's accuracy: relative rank error 1/10000, exact on fewer rows than that.
ACCURACY = 10_000


def publishes(events: DataFrame) -> DataFrame:
    return events.filter(F.col("event") == PUBLISH)


def _totals(frame: DataFrame, *keys: Column | str) -> DataFrame:
    return frame.groupBy(*keys).agg(
        F.count("*").alias("messages"), F.coalesce(F.sum("bytes"), F.lit(0)).cast("long").alias("bytes")
    )


def by_topic(events: DataFrame) -> DataFrame:
    """topic, messages, bytes (payload bytes), busiest first."""
    return _totals(publishes(events), "topic").orderBy(F.desc("messages"), "topic")


def prefix(topic: Column, depth: int) -> Column:
    """The first `depth` levels of a topic (`a/b/c`, depth 2: `a/b`)."""
    return F.array_join(F.slice(F.split(topic, "/"), 1, depth), "/")


def by_prefix(events: DataFrame, depth: int) -> DataFrame:
    """prefix, topics, messages, bytes."""
    rows = publishes(events).withColumn("prefix", prefix(F.col("topic"), depth))
    return (
        rows.groupBy("prefix")
        .agg(
            F.countDistinct("topic").alias("topics"),
            F.count("*").alias("messages"),
            F.coalesce(F.sum("bytes"), F.lit(0)).cast("long").alias("bytes"),
        )
        .orderBy(F.desc("messages"), "prefix")
    )


def by_publisher(events: DataFrame) -> DataFrame:
    """publisher, topics, messages, bytes."""
    return (
        publishes(events)
        .groupBy(F.col("clientid").alias("publisher"))
        .agg(
            F.countDistinct("topic").alias("topics"),
            F.count("*").alias("messages"),
            F.coalesce(F.sum("bytes"), F.lit(0)).cast("long").alias("bytes"),
        )
        .orderBy(F.desc("messages"), "publisher")
    )


def by_time(events: DataFrame, start: dt.datetime, end: dt.datetime, bucket_s: int) -> DataFrame:
    """bucket, messages, bytes, every bucket of the window (empty ones as 0)."""
    first = int(start.timestamp())
    count = max(1, -(-int((end - start).total_seconds()) // bucket_s))
    n = F.floor((F.unix_micros("ts") / 1_000_000 - first) / bucket_s).cast("long").alias("n")
    totals = _totals(publishes(events), n)
    buckets = events.sparkSession.range(count).withColumnRenamed("id", "n")
    return (
        buckets.join(totals, "n", "left")
        .fillna(0, ["messages", "bytes"])
        .select(F.timestamp_seconds(F.lit(first) + F.col("n") * bucket_s).alias("bucket"), "messages", "bytes")
        .orderBy("bucket")
    )


def qos_mix(events: DataFrame) -> DataFrame:
    """qos, messages, bytes, share (of all publishes)."""
    totals = _totals(publishes(events), "qos")
    return totals.select(
        "qos", "messages", "bytes", F.round(F.col("messages") / F.sum("messages").over(_all()), 4).alias("share")
    ).orderBy("qos")


def retain_mix(messages: DataFrame) -> DataFrame:
    """retain, messages, share (of stored messages)."""
    totals = messages.groupBy("retain").agg(F.count("*").alias("messages"))
    return totals.select(
        "retain", "messages", F.round(F.col("messages") / F.sum("messages").over(_all()), 4).alias("share")
    ).orderBy("retain")


def _all() -> WindowSpec:
    """One window over every row (the tables it serves have a handful of rows)."""
    return Window.partitionBy(F.lit(1))


def latencies(events: DataFrame) -> DataFrame:
    """One row per delivery or ack whose publish is in the window: kind, msgid, clientid, topic, latency_ms."""
    published = publishes(events).select("msgid", F.col("ts").alias("published"))
    receipts = events.filter(F.col("event").isin(DELIVERED, ACKED)).select(
        F.when(F.col("event") == DELIVERED, "delivered").otherwise("acked").alias("kind"),
        "msgid",
        "clientid",
        "topic",
        "ts",
    )
    joined = receipts.join(published, "msgid")
    millis = (F.unix_micros("ts") - F.unix_micros("published")) / F.lit(1000.0)
    return joined.select("kind", "msgid", "clientid", "topic", millis.alias("latency_ms"))


def latency_percentiles(latency_rows: DataFrame) -> DataFrame:
    """kind (delivered / acked), count, p50, p90, p95, p99, max (milliseconds)."""
    quantiles = F.percentile_approx("latency_ms", list(PERCENTILES), ACCURACY)
    summary = latency_rows.groupBy("kind").agg(
        F.count("*").alias("count"), quantiles.alias("q"), F.max("latency_ms").alias("max_ms")
    )
    named = [F.col("q")[i].alias(f"p{round(p * 100)}_ms") for i, p in enumerate(PERCENTILES)]
    return summary.select("kind", "count", *named, "max_ms").orderBy(F.desc("kind"))


LATENCY_EDGES = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def latency_histogram(latency_rows: DataFrame) -> DataFrame:
    """kind, upper_ms (bucket's upper bound; null above the last), count: the distribution chart."""
    upper = F.lit(None).cast("double")
    for edge in reversed(LATENCY_EDGES):
        upper = F.when(F.col("latency_ms") < edge, F.lit(float(edge))).otherwise(upper)
    return (
        latency_rows.groupBy("kind", upper.alias("upper_ms"))
        .agg(F.count("*").alias("count"))
        .orderBy("kind", F.col("upper_ms").asc_nulls_last())
    )


def filter_regex(topic_filter: Column) -> Column:
    """An MQTT topic filter as an anchored regex: `+` one level, trailing `#` any rest (parent included)."""
    escaped = F.regexp_replace(topic_filter, r"([.^$*?()\[\]{}|\\])", r"\\$1")
    plus = F.regexp_replace(escaped, r"\+", "[^/]*")
    hashed = F.regexp_replace(F.regexp_replace(plus, "^#$", ".*"), "/#$", "(/.*)?")
    return F.concat(F.lit("^"), hashed, F.lit("$"))


def backlog(offsets: DataFrame, messages: DataFrame) -> DataFrame:
    """Per (subscriber, subscription filter): stored messages after its offset, and the oldest one.

    Filters are matched against the distinct stored topics (few), then messages joined by topic, so
    the cost is linear in messages however many filters use wildcards.
    """
    topics = messages.select("topic").distinct()
    subscriptions = offsets.select(
        "clientid",
        F.col("topic").alias("filter"),
        F.col("msgid").alias("offset"),
        filter_regex(F.col("topic")).alias("pattern"),
    )
    # RLIKE in SQL takes its pattern from a column (Column.rlike only takes a literal).
    matches = subscriptions.crossJoin(topics).filter(F.expr("topic RLIKE pattern"))
    pending = matches.join(messages.select("topic", "msgid", "arrived"), "topic").filter(
        F.col("msgid") > F.col("offset")
    )
    counted = pending.groupBy("clientid", "filter").agg(
        F.count("*").alias("pending"), F.min("arrived").alias("oldest_pending")
    )
    every = offsets.select("clientid", F.col("topic").alias("filter"), F.col("msgid").alias("offset"))
    return (
        every.join(counted, ["clientid", "filter"], "left")
        .fillna(0, ["pending"])
        .select("clientid", "filter", "offset", F.col("pending").cast("long"), "oldest_pending")
        .orderBy(F.desc("pending"), "clientid", "filter")
    )
