"""Extract: a source's tables for a window, as DataFrames with one shape whatever the database.

The window is pushed down to the database: a WHERE on `ts` / `arrived` in the JDBC query
(partitioned on `id` for parallel reads), the day partitions plus a `ts` range for Cassandra's
event_log, the hour buckets for Cassandra's msg (a direct join on the partition key), a `$match`
stage for MongoDB. Payloads are never read: sizes come from the event log's `bytes`.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING

from spark_analytics.sources import Source, mongo_uri
from spark_analytics.window import Window

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

EVENT_LOG_COLUMNS = (
    "event string, clientid string, username string, node string, topic string, qos int, "
    "bytes long, reason string, peername string, msgid string, ts timestamp"
)
MSG_COLUMNS = "msgid string, sender string, topic string, qos int, retain boolean, arrived timestamp"
ACKED_COLUMNS = "clientid string, topic string, msgid string"

SINGLE_PARTITION = "com.mongodb.spark.sql.connector.read.partitioner.SinglePartitionPartitioner"
CASSANDRA = "org.apache.spark.sql.cassandra"
JDBC = ("pgsql", "mysql")  # read through Spark's JDBC source


def _names(schema: str) -> list[str]:
    return [part.split()[0] for part in schema.split(",")]


def event_log(
    spark: SparkSession, source: Source, window: Window, events: tuple[str, ...], partitions: int = 1
) -> DataFrame:
    """Event-log rows of these `events` (hookpoint names) with window.start <= ts < window.end."""
    if source.db in JDBC:
        names = ", ".join(f"'{name}'" for name in events)  # our own constants, never user text
        start, end = _sql_time(source, window.start), _sql_time(source, window.end)
        where = f"ts >= {start} AND ts < {end} AND event IN ({names})"
        return _jdbc(spark, source, "mqtt_event_log", EVENT_LOG_COLUMNS, where, partitions)
    if source.db == "cassa":
        from pyspark.sql import functions as F

        frame = _cassandra(spark, source, "event_log")
        frame = frame.filter(F.col("day").isin(window.days()))
        frame = frame.filter((F.col("ts") >= F.lit(window.start)) & (F.col("ts") < F.lit(window.end)))
        return _shape(frame.filter(F.col("event").isin(*events)), EVENT_LOG_COLUMNS)
    extra: dict[str, object] = {"event": {"$in": list(events)}}
    return _mongo(spark, source, "mqtt_event_log", EVENT_LOG_COLUMNS, "ts", window.start, window.end, extra)


def messages(
    spark: SparkSession, source: Source, start: dt.datetime | None, end: dt.datetime, partitions: int = 1
) -> DataFrame:
    """Stored messages with start <= arrived < end (no lower bound when start is None)."""
    if source.db in JDBC:
        where = f"arrived < {_sql_time(source, end)}"
        where += f" AND arrived >= {_sql_time(source, start)}" if start else ""
        return _jdbc(spark, source, "mqtt_msg", MSG_COLUMNS, where, partitions)
    if source.db == "cassa":
        from pyspark.sql import functions as F

        from actions.cassa.functions import bucket_at  # the hour bucket the writer used

        buckets = _cassandra(spark, source, "msg_bucket").filter(F.col("bucket") <= bucket_at(end.timestamp()))
        if start is not None:
            buckets = buckets.filter(F.col("bucket") >= bucket_at(start.timestamp()))
        # Joined on msg's full partition key: the connector reads only those partitions (direct join).
        stored = _cassandra(spark, source, "msg", directJoinSetting="on")
        frame = buckets.join(stored, ["topic", "bucket"])
        frame = frame.filter(F.col("arrived") < F.lit(end))
        if start is not None:
            frame = frame.filter(F.col("arrived") >= F.lit(start))
        return _shape(frame, MSG_COLUMNS)
    return _mongo(spark, source, "mqtt_msg", MSG_COLUMNS, "arrived", start, end)


def offsets(spark: SparkSession, source: Source) -> DataFrame:
    """Every pubsub offset: (clientid, topic filter, last acked msgid; '' = before everything)."""
    if source.db in JDBC:
        return _jdbc(spark, source, "mqtt_acked", ACKED_COLUMNS, "true", 1)
    if source.db == "cassa":
        return _shape(_cassandra(spark, source, "acked"), ACKED_COLUMNS)
    return _mongo(spark, source, "mqtt_acked", ACKED_COLUMNS, None, None, None)


def _shape(frame: DataFrame, schema: str) -> DataFrame:
    """The columns in the common order and types (Cassandra's tinyint qos, int bytes...)."""
    from pyspark.sql import functions as F

    pairs = [part.split() for part in schema.split(",")]
    return frame.select(*(F.col(name).cast(kind).alias(name) for name, kind in pairs))


def _sql_time(source: Source, at: dt.datetime) -> str:
    utc = at.astimezone(dt.UTC)
    if source.db == "mysql":  # DATETIME(6) columns hold UTC without a zone
        return f"'{utc.replace(tzinfo=None).isoformat(sep=' ')}'"
    return f"'{utc.isoformat()}'::timestamptz"


def _columns(source: Source, schema: str) -> str:
    """The select list. MySQL's zone-less DATETIME travels as text and Spark (session zone UTC)
    casts it, so no JDBC driver or JVM time zone can shift it."""
    if source.db != "mysql":
        return ", ".join(_names(schema))
    pairs = [part.split() for part in schema.split(",")]
    return ", ".join(
        f"DATE_FORMAT({name}, '%Y-%m-%d %H:%i:%s.%f') AS {name}" if kind == "timestamp" else name
        for name, kind in pairs
    )


def _jdbc_options(source: Source) -> dict[str, str]:
    host, port = source.setting("server")
    if source.db == "mysql":
        options = {
            # The mysql: scheme makes Spark quote names MySQL's way (backticks); the MariaDB driver
            # (Debian's, and MySQL-compatible) takes that scheme with permitMysqlScheme.
            "url": f"jdbc:mysql://{host}:{port}/{source.setting('database')}?permitMysqlScheme",
            "driver": "org.mariadb.jdbc.Driver",
            "user": source.setting("username") or source.setting("user") or "",
        }
        if source.setting("ssl"):
            options |= {"useSsl": "true", "trustServerCertificate": "false" if source.setting("ssl.verify") else "true"}
    else:
        options = {
            "url": f"jdbc:postgresql://{host}:{port}/{source.setting('database')}",
            "driver": "org.postgresql.Driver",
            "user": source.setting("username") or "",
        }
        if source.setting("ssl"):
            options |= {"ssl": "true", "sslmode": "verify-full" if source.setting("ssl.verify") else "require"}
    return options | {"password": source.setting("password") or "", "fetchsize": "20000"}


def _jdbc(spark: SparkSession, source: Source, table: str, schema: str, where: str, partitions: int) -> DataFrame:
    options = _jdbc_options(source)

    def read(**extra: str) -> DataFrame:  # a new reader each time: a reader keeps its options
        return spark.read.format("jdbc").options(**options, **extra).load()

    query = f"SELECT {_columns(source, schema)}, id FROM {table} WHERE {where}"
    if partitions <= 1:
        return _shape(read(query=query), schema)
    # Parallel reads: `partitions` range queries on id, the bounds taken from the window's rows.
    bounds = read(query=f"SELECT min(id) AS lo, max(id) AS hi FROM {table} WHERE {where}").first()
    if bounds is None or bounds["lo"] is None:
        return _shape(read(query=query), schema)
    frame = read(
        dbtable=f"({query}) AS window_rows",
        partitionColumn="id",
        lowerBound=str(bounds["lo"]),
        upperBound=str(bounds["hi"] + 1),
        numPartitions=str(partitions),
    )
    return _shape(frame, schema)


def _cassandra(spark: SparkSession, source: Source, table: str, **extra: str) -> DataFrame:
    nodes = source.setting("nodes") or [("127.0.0.1", 9042)]
    options = extra | {
        "keyspace": source.setting("keyspace"),
        "table": table,
        "spark.cassandra.connection.host": ",".join(host for host, _ in nodes),
        "spark.cassandra.connection.port": str(nodes[0][1]),
        "spark.cassandra.connection.localDC": source.setting("local_datacenter") or "datacenter1",
    }
    if source.setting("username"):
        options["spark.cassandra.auth.username"] = source.setting("username")
        options["spark.cassandra.auth.password"] = source.setting("password") or ""
    if source.setting("ssl"):
        options["spark.cassandra.connection.ssl.enabled"] = "true"
    return spark.read.format(CASSANDRA).options(**options).load()


def _mongo(
    spark: SparkSession,
    source: Source,
    collection: str,
    schema: str,
    field: str | None,
    start: dt.datetime | None,
    end: dt.datetime | None,
    extra: dict[str, object] | None = None,
) -> DataFrame:
    match: dict[str, object] = dict(extra or {})
    if field is not None:
        bounds: dict[str, object] = {}
        if start is not None:
            bounds["$gte"] = {"$date": {"$numberLong": str(int(start.timestamp() * 1000))}}
        if end is not None:
            bounds["$lt"] = {"$date": {"$numberLong": str(int(end.timestamp() * 1000))}}
        match[field] = bounds
    # `_id` stays in: FerretDB v1 panics on some pipelines without it ("key not found: _id").
    project = {name: 1 for name in _names(schema)}
    pipeline = [{"$match": match}, {"$project": project}]
    frame = (
        spark.read.format("mongodb")
        .schema(schema)
        .option("connection.uri", mongo_uri(source))
        .option("database", source.setting("database"))
        .option("collection", collection)
        # FerretDB has no $sample/$bucketAuto, which the default partitioner needs; a real MongoDB
        # replica set reads in parallel with `--conf spark.mongodb.read.partitioner=...SamplePartitioner`.
        .option("partitioner", spark.conf.get("spark.mongodb.read.partitioner", SINGLE_PARTITION))
        .option("aggregation.pipeline", json.dumps(pipeline))
        .load()
    )
    return _shape(frame, schema)
