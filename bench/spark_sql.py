"""The two reports' aggregations as plain SQL inside PostgreSQL: the benchmark's baseline.

The same definitions as spark_analytics/transforms (session stitching by lead/lag, the online curve
from +1/-1 deltas, storms, nodes, reasons; traffic per topic, prefix, publisher and bucket, QoS and
retained mix, latency percentiles, backlog), each query timed. Sessions are materialized once in a
temporary table, as the Spark job keeps its extracted rows in memory.
"""

from __future__ import annotations

import time

import asyncpg

LIFECYCLE = "('client.connected', 'client.disconnected')"

SESSIONS = f"""
CREATE TEMP TABLE bench_sessions AS
WITH steps AS (
    SELECT clientid, node, event, ts, reason,
        lead(event) OVER w AS next_event, lead(ts) OVER w AS next_ts, lead(reason) OVER w AS next_reason,
        lag(event) OVER w AS prev_event
    FROM mqtt_event_log
    WHERE ts >= $1 AND ts < $2 AND event IN {LIFECYCLE}
    WINDOW w AS (PARTITION BY clientid ORDER BY ts, CASE WHEN event = 'client.connected' THEN 0 ELSE 1 END)
)
SELECT clientid, node, ts AS start, next_ts AS "end",
    CASE WHEN next_event = 'client.disconnected' THEN next_reason
         WHEN next_event = 'client.connected' THEN 'missing_disconnect' END AS reason,
    next_event IS NULL AS open, false AS clipped
FROM steps WHERE event = 'client.connected'
UNION ALL
SELECT clientid, node, $1, ts, reason, false, true
FROM steps WHERE event = 'client.disconnected' AND prev_event IS NULL
"""

SESSION_QUERIES = {
    "sessions (rows)": "SELECT count(*) FROM bench_sessions",
    "online": """
        WITH deltas AS (
            SELECT floor((extract(epoch FROM start) - $1) / $2)::bigint AS n, 1 AS up, 0 AS down FROM bench_sessions
            UNION ALL
            SELECT floor((extract(epoch FROM "end") - $1) / $2)::bigint, 0, 1
            FROM bench_sessions WHERE "end" IS NOT NULL
        ), per AS (SELECT n, sum(up) AS ups, sum(down) AS downs FROM deltas GROUP BY n)
        SELECT g.n, sum(coalesce(ups, 0) - coalesce(downs, 0)) OVER (ORDER BY g.n)
        FROM generate_series(0, $3 - 1) AS g(n) LEFT JOIN per USING (n)""",
    "storms": """
        SELECT clientid, date_trunc('hour', start), count(*) FROM bench_sessions WHERE NOT clipped
        GROUP BY 1, 2 HAVING count(*) > $1 ORDER BY 3 DESC""",
    "nodes": """
        SELECT node, count(*), count(DISTINCT clientid), sum(open::int),
            avg(extract(epoch FROM coalesce("end", $1) - start)) FROM bench_sessions GROUP BY node""",
    "reasons": "SELECT coalesce(reason, 'unknown'), count(*) FROM bench_sessions WHERE NOT open GROUP BY 1",
}

PUBLISHED = "mqtt_event_log WHERE ts >= $1 AND ts < $2 AND event = 'message.publish'"

TRAFFIC_QUERIES = {
    "traffic_by_topic": f"SELECT topic, count(*), sum(bytes) FROM {PUBLISHED} GROUP BY topic ORDER BY 2 DESC",
    "traffic_by_prefix": f"""
        SELECT array_to_string((string_to_array(topic, '/'))[1:$3], '/') AS prefix, count(DISTINCT topic), count(*),
            sum(bytes) FROM {PUBLISHED} GROUP BY 1 ORDER BY 3 DESC""",
    "traffic_by_publisher": f"""
        SELECT clientid, count(DISTINCT topic), count(*), sum(bytes) FROM {PUBLISHED} GROUP BY 1 ORDER BY 3 DESC""",
    "traffic_by_time": f"""
        SELECT floor((extract(epoch FROM ts) - extract(epoch FROM $1::timestamptz)) / $3)::bigint, count(*),
            sum(bytes) FROM {PUBLISHED} GROUP BY 1 ORDER BY 1""",
    "qos_mix": f"SELECT qos, count(*), sum(bytes) FROM {PUBLISHED} GROUP BY qos",
    "retain_mix": "SELECT retain, count(*) FROM mqtt_msg WHERE arrived >= $1 AND arrived < $2 GROUP BY retain",
    "latency": """
        WITH p AS (SELECT msgid, ts FROM mqtt_event_log WHERE ts >= $1 AND ts < $2 AND event = 'message.publish'),
        r AS (SELECT event, msgid, ts FROM mqtt_event_log
              WHERE ts >= $1 AND ts < $2 AND event IN ('message.delivered', 'message.acked'))
        SELECT r.event, count(*),
            percentile_cont(ARRAY[0.5, 0.9, 0.95, 0.99]) WITHIN GROUP (
                ORDER BY extract(epoch FROM r.ts - p.ts) * 1000),
            max(extract(epoch FROM r.ts - p.ts) * 1000)
        FROM r JOIN p USING (msgid) GROUP BY r.event""",
    "backlog": """
        WITH t AS (SELECT DISTINCT topic FROM mqtt_msg WHERE arrived < $1),
        m AS (
            SELECT a.clientid, a.topic AS filter, a.msgid AS off, t.topic FROM mqtt_acked a JOIN t ON t.topic ~ (
                '^' || replace(regexp_replace(regexp_replace(a.topic, '/#$', '(/.*)?'), '^#$', '.*'), '+', '[^/]*')
                || '$'))
        SELECT m.clientid, m.filter, count(msg.msgid)
        FROM m LEFT JOIN mqtt_msg msg ON msg.topic = m.topic AND msg.msgid > m.off AND msg.arrived < $1
        GROUP BY 1, 2""",
}


async def run_all(
    dsn: str, start: object, end: object, bucket_s: int, buckets: int, depth: int, threshold: int
) -> tuple[dict[str, float], dict[str, object]]:
    """Seconds per query, and the headline numbers (sessions, messages, deliveries) to compare."""
    conn = await asyncpg.connect(dsn)
    seconds: dict[str, float] = {}
    found: dict[str, object] = {}
    first = start.timestamp()  # type: ignore[attr-defined]
    try:
        await conn.execute("SET work_mem = '256MB'")

        async def timed(name: str, query: str, *args: object) -> list[asyncpg.Record]:
            began = time.perf_counter()
            rows: list[asyncpg.Record] = await conn.fetch(query, *args)
            seconds[name] = time.perf_counter() - began
            return rows

        await timed("stitch sessions", SESSIONS, start, end)
        found["sessions"] = (await timed("sessions (rows)", SESSION_QUERIES["sessions (rows)"]))[0][0]
        await timed("online", SESSION_QUERIES["online"], first, bucket_s, buckets)
        await timed("storms", SESSION_QUERIES["storms"], threshold)
        await timed("nodes", SESSION_QUERIES["nodes"], end)
        await timed("reasons", SESSION_QUERIES["reasons"])
        topics = await timed("traffic_by_topic", TRAFFIC_QUERIES["traffic_by_topic"], start, end)
        found["messages"] = sum(row[1] for row in topics)
        await timed("traffic_by_prefix", TRAFFIC_QUERIES["traffic_by_prefix"], start, end, depth)
        await timed("traffic_by_publisher", TRAFFIC_QUERIES["traffic_by_publisher"], start, end)
        await timed("traffic_by_time", TRAFFIC_QUERIES["traffic_by_time"], start, end, float(bucket_s))
        await timed("qos_mix", TRAFFIC_QUERIES["qos_mix"], start, end)
        await timed("retain_mix", TRAFFIC_QUERIES["retain_mix"], start, end)
        latency = await timed("latency", TRAFFIC_QUERIES["latency"], start, end)
        found["delivered"] = next((row[1] for row in latency if row[0] == "message.delivered"), 0)
        await timed("backlog", TRAFFIC_QUERIES["backlog"], end)
    finally:
        await conn.close()
    return seconds, found
