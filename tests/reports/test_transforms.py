"""Transforms on small hand-made DataFrames, with the exact rows expected."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame, SparkSession

from spark_analytics.extract import EVENT_LOG_COLUMNS, MSG_COLUMNS
from spark_analytics.transforms import sessions as S
from spark_analytics.transforms import traffic as T

T0 = dt.datetime(2026, 5, 1, 10, 0, tzinfo=dt.UTC)
END = T0 + dt.timedelta(hours=2)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def log(spark: SparkSession, rows: list[tuple[object, ...]]) -> DataFrame:
    """Rows of (event, clientid, node, ts, reason[, topic, qos, bytes, msgid]) as an event-log frame."""
    full = []
    for row in rows:
        event, clientid, node, ts, reason, *rest = row
        topic, qos, size, msgid = (*rest, None, None, None, None)[:4]
        full.append((event, clientid, None, node, topic, qos, size, reason, None, msgid, ts))
    return spark.createDataFrame(full, EVENT_LOG_COLUMNS)


def plain(frame: DataFrame) -> list[tuple[object, ...]]:
    """Rows as tuples; PySpark gives timestamps as naive local times: made aware UTC to compare."""
    aware = lambda v: v.astimezone(dt.UTC) if isinstance(v, dt.datetime) else v  # noqa: E731
    return [tuple(aware(value) for value in row) for row in frame.collect()]


def test_sessions_stitch_missing_disconnects_and_cut_at_the_window(spark: SparkSession) -> None:
    events = log(
        spark,
        [
            # a: a full session, then a connect whose disconnect was never logged, then one to the end
            ("client.connected", "a", "n1", at(10), None),
            ("client.disconnected", "a", "n1", at(20), "normal"),
            ("client.connected", "a", "n1", at(30), None),
            ("client.connected", "a", "n2", at(45), None),
            # b: connected before the window: its disconnect comes first; then a duplicate disconnect
            ("client.disconnected", "b", "n2", at(5), "keepalive_timeout"),
            ("client.disconnected", "b", "n2", at(6), "normal"),
            # c: the same instant: the connect sorts first, a zero-length session
            ("client.disconnected", "c", "n1", at(50), "kicked"),
            ("client.connected", "c", "n1", at(50), None),
        ],
    )
    got = sorted(plain(S.sessions(events, T0, END)), key=lambda r: (r[0], r[2]))
    assert got == [
        ("a", "n1", at(10), at(20), 600.0, "normal", False, False),
        ("a", "n1", at(30), at(45), 900.0, "missing_disconnect", False, False),
        ("a", "n2", at(45), None, 75 * 60.0, None, True, False),
        ("b", "n2", T0, at(5), 300.0, "keepalive_timeout", False, True),
        ("c", "n1", at(50), at(50), 0.0, "kicked", False, False),
    ]


def sessions_frame(spark: SparkSession, rows: list[tuple[object, ...]]) -> DataFrame:
    schema = (
        "clientid string, node string, start timestamp, end timestamp, duration_s double, reason string, "
        "open boolean, clipped boolean"
    )
    return spark.createDataFrame(rows, schema)


def test_online_curve_counts_every_bucket(spark: SparkSession) -> None:
    rows = [
        ("a", "n1", at(0), at(25), 1500.0, "normal", False, True),
        ("b", "n1", at(10), None, 6600.0, None, True, False),
        ("c", "n2", at(40), at(50), 600.0, "normal", False, False),
    ]
    curve = plain(S.online(sessions_frame(spark, rows), T0, at(60), 20 * 60))
    assert curve == [(at(0), 2, 2, 0), (at(20), 1, 0, 1), (at(40), 1, 1, 1)]


def test_storms_nodes_reasons(spark: SparkSession) -> None:
    flapping = [("f", "n1", at(m), at(m + 1), 60.0, "closed", False, False) for m in range(0, 12, 2)]
    rows = [
        *flapping,
        ("g", "n2", at(0), None, 7200.0, None, True, False),
        ("h", "n2", T0, at(3), 180.0, None, False, True),
    ]
    frame = sessions_frame(spark, rows)
    assert plain(S.storms(frame, 5)) == [("f", T0, 6)]
    assert plain(S.storms(frame, 6)) == []
    assert plain(S.nodes(frame)) == [("n1", 6, 1, 0, 60.0, 360.0), ("n2", 2, 2, 1, 3690.0, 7380.0)]
    assert plain(S.reasons(frame)) == [("closed", 6), ("unknown", 1)]
    assert plain(S.durations(frame)) == [("1-10m", 600.0, 7), ("1-6h", 21600.0, 1)]


def traffic_log(spark: SparkSession) -> DataFrame:
    rows = [
        ("message.publish", "p1", "n1", at(1), None, "fleet/a/temp", 1, 10, "M1"),
        ("message.publish", "p1", "n1", at(2), None, "fleet/a/temp", 0, 20, "M2"),
        ("message.publish", "p2", "n1", at(25), None, "fleet/b/hum", 1, 5, "M3"),
        ("message.publish", "p2", "n1", at(26), None, "other", 2, 0, "M4"),
    ]
    # deliveries: M1 after 10, 20 ms (two subscribers), M3 after 40 ms; acks of M1 after 30 and 50 ms
    ms = lambda base, n: base + dt.timedelta(milliseconds=n)  # noqa: E731
    rows += [
        ("message.delivered", "s1", "n1", ms(at(1), 10), None, "fleet/a/temp", 1, 10, "M1"),
        ("message.delivered", "s2", "n1", ms(at(1), 20), None, "fleet/a/temp", 1, 10, "M1"),
        ("message.delivered", "s1", "n1", ms(at(25), 40), None, "fleet/b/hum", 1, 5, "M3"),
        ("message.acked", "s1", "n1", ms(at(1), 30), None, "fleet/a/temp", 1, 10, "M1"),
        ("message.acked", "s2", "n1", ms(at(1), 50), None, "fleet/a/temp", 1, 10, "M1"),
        ("message.delivered", "s1", "n1", at(3), None, "old", 1, 1, "BEFORE-WINDOW"),  # no publish: left out
    ]
    return log(spark, rows)


def test_traffic_totals(spark: SparkSession) -> None:
    events = traffic_log(spark)
    assert plain(T.by_topic(events)) == [("fleet/a/temp", 2, 30), ("fleet/b/hum", 1, 5), ("other", 1, 0)]
    assert plain(T.by_prefix(events, 1)) == [("fleet", 2, 3, 35), ("other", 1, 1, 0)]
    assert plain(T.by_prefix(events, 2)) == [("fleet/a", 1, 2, 30), ("fleet/b", 1, 1, 5), ("other", 1, 1, 0)]
    assert plain(T.by_publisher(events)) == [("p1", 1, 2, 30), ("p2", 2, 2, 5)]
    assert plain(T.by_time(events, T0, at(60), 1200)) == [(at(0), 2, 30), (at(20), 2, 5), (at(40), 0, 0)]
    assert plain(T.qos_mix(events)) == [(0, 1, 20, 0.25), (1, 2, 15, 0.5), (2, 1, 0, 0.25)]


def test_latency_percentiles(spark: SparkSession) -> None:
    rows = T.latencies(traffic_log(spark))
    assert sorted(plain(rows.select("kind", "latency_ms"))) == [
        ("acked", 30.0),
        ("acked", 50.0),
        ("delivered", 10.0),
        ("delivered", 20.0),
        ("delivered", 40.0),
    ]
    assert plain(T.latency_percentiles(rows)) == [
        ("delivered", 3, 20.0, 40.0, 40.0, 40.0, 40.0),
        ("acked", 2, 30.0, 50.0, 50.0, 50.0, 50.0),
    ]
    # 100 deliveries of 1..100 ms: nearest-rank percentiles
    many = spark.createDataFrame(
        [("delivered", f"M{n}", "s", "t", float(n)) for n in range(1, 101)],
        "kind string, msgid string, clientid string, topic string, latency_ms double",
    )
    assert plain(T.latency_percentiles(many)) == [("delivered", 100, 50.0, 90.0, 95.0, 99.0, 100.0)]
    assert plain(T.latency_histogram(rows)) == [
        ("acked", 50.0, 1),
        ("acked", 100.0, 1),
        ("delivered", 20.0, 1),
        ("delivered", 50.0, 2),
    ]


def test_retain_mix_and_backlog(spark: SparkSession) -> None:
    stored = spark.createDataFrame(
        [
            ("0001", "p1", "fleet/a/temp", 1, False, at(1)),
            ("0002", "p1", "fleet/a/temp", 1, True, at(2)),
            ("0003", "p2", "fleet/b/hum", 1, False, at(3)),
            ("0004", "p2", "fleet", 1, False, at(4)),
            ("0005", "p2", "x.y", 1, False, at(5)),
        ],
        MSG_COLUMNS,
    )
    assert plain(T.retain_mix(stored)) == [(False, 4, 0.8), (True, 1, 0.2)]
    offsets = spark.createDataFrame(
        [
            ("s1", "fleet/#", "0002"),  # 0003 and 0004 ('#' takes the parent level too)
            ("s2", "fleet/+/temp", ""),  # before everything: 0001, 0002
            ("s3", "x.y", "0005"),  # all acked ('.' is literal)
            ("s4", "xzy", ""),  # matches nothing
        ],
        "clientid string, topic string, msgid string",
    )
    assert plain(T.backlog(offsets, stored)) == [
        ("s1", "fleet/#", "0002", 2, at(3)),
        ("s2", "fleet/+/temp", "", 2, at(1)),
        ("s3", "x.y", "0005", 0, None),
        ("s4", "xzy", "", 0, None),
    ]
