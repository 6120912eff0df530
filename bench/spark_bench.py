"""The Spark reports over a large fleet in PostgreSQL, against the same aggregations as plain SQL.

    .venv/bin/python -m bench.spark_bench fill [--port 5450] [--devices 12000] [--hours 24] ...
    .venv/bin/python -m bench.spark_bench run [--port 5450] [--master local[2]] [--conf KEY=VALUE ...]

`fill` starts a PostgreSQL of its own (scripts/postgres.sh, port 5450, database spark_bench) and
writes a synthetic fleet through the bridge's writers (spark_analytics.fleet): the defaults give
about 10 million publishes and 1 million sessions over 24 hours. It prints the load time.
`run` times both reports (SparkSession start included) and, in the same run, the same aggregations
as SQL inside PostgreSQL (bench/spark_sql.py), and checks that both give the same headline numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path

import asyncpg

from bench.machine import describe, table
from bench.services import ROOT, start_server

DATABASE = "spark_bench"
START = 1_780_000_000.0  # 2026-05-28T20:26:40Z: a fixed window, so runs are comparable


def config_text(port: int) -> str:
    """Three pools on one database: messages, event log, acks (see spark_analytics.fleet.rules_text)."""
    head = "node.name = fleet@127.0.0.1\nbroker.listener.tcp = 127.0.0.1:0\nmetrics.listener = off\n"
    pools = ""
    for name in ("pool1", "log", "acks"):
        pools += (
            f"backend.pgsql.{name}.server = 127.0.0.1:{port}\nbackend.pgsql.{name}.username = hookbridge\n"
            f"backend.pgsql.{name}.password = hookbridge\nbackend.pgsql.{name}.database = {DATABASE}\n"
        )
    return head + pools


async def fresh_database(port: int) -> None:
    conn = await asyncpg.connect(f"postgresql://hookbridge:hookbridge@127.0.0.1:{port}/mqtt")
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        await conn.execute(f"CREATE DATABASE {DATABASE}")
    finally:
        await conn.close()


def fill(args: argparse.Namespace) -> int:
    from spark_analytics.fleet import Fleet, fill_from_config

    start_server("postgres.sh", args.port, quiet=False)
    asyncio.run(fresh_database(args.port))
    fleet = Fleet(
        devices=args.devices,
        hours=args.hours,
        flapping=args.flapping,
        apps=args.apps,
        period_scale=args.period_scale,
        start=START,
    )
    print(describe())
    print(f"fleet: {fleet}")
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        config = Path(tmp) / "bridge.conf"
        config.write_text(config_text(args.port))
        started = time.monotonic()
        count = asyncio.run(fill_from_config(config, "pgsql.pool1", fleet, 500_000, "pgsql.log", "pgsql.acks"))
        elapsed = time.monotonic() - started
    rate = count / elapsed
    print(f"loaded {count:,} events through the bridge's PostgreSQL writers in {elapsed:.0f}s ({rate:,.0f}/s)")
    return 0


def run(args: argparse.Namespace) -> int:
    from bench.spark_sql import run_all
    from spark_analytics.jobs import sessions as sessions_job
    from spark_analytics.jobs import traffic as traffic_job
    from spark_analytics.options import Options
    from spark_analytics.progress import Progress
    from spark_analytics.run import run as run_report
    from spark_analytics.sources import load_source
    from spark_analytics.spark import build_session
    from spark_analytics.window import Window

    print(describe())
    begin = dt.datetime.fromtimestamp(START, dt.UTC).replace(minute=0, second=0)
    window = Window(begin, begin + dt.timedelta(hours=args.hours + 1))
    rows: list[tuple[str, ...]] = []
    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        config = Path(tmp) / "bridge.conf"
        config.write_text(config_text(args.port))
        source = load_source(config, "pgsql.pool1")
        options = Options(window=window, out=Path(args.out), partitions=args.partitions)
        began = time.perf_counter()
        conf = {"spark.driver.memory": args.driver_memory, "spark.sql.shuffle.partitions": "8"}
        conf.update(setting.split("=", 1) for setting in args.conf)  # e.g. spark.executor.memory on a cluster
        spark = build_session(args.master, app="hookbridge-bench", conf=conf)
        startup = time.perf_counter() - began
        rows.append(("Spark session start (JVM)", f"{startup:.1f}", ""))
        spark_seconds: dict[str, float] = {}
        for job in (sessions_job, traffic_job):
            began = time.perf_counter()
            run_report(job, source, options, spark=spark, progress=Progress(4))  # type: ignore[arg-type]
            spark_seconds[job.NAME] = time.perf_counter() - began
        out = Path(args.out)
        spark_found = {
            "sessions": spark.read.parquet(str(out / "sessions.parquet")).count(),
            "messages": spark.read.parquet(str(out / "traffic_by_topic.parquet")).groupBy().sum("messages").first()[0],
            "delivered": spark.read.parquet(str(out / "latency.parquet")).filter("kind = 'delivered'").first()["count"],
        }
        spark.stop()
        dsn = f"postgresql://hookbridge:hookbridge@127.0.0.1:{args.port}/{DATABASE}"
        buckets = -(-int(window.seconds) // options.bucket)
        sql_seconds, found = asyncio.run(
            run_all(
                dsn, window.start, window.end, options.bucket, buckets, options.prefix_depth, options.storm_threshold
            )
        )
    session_sql = sum(
        v
        for k, v in sql_seconds.items()
        if k in {"stitch sessions", "sessions (rows)", "online", "storms", "nodes", "reasons"}
    )
    traffic_sql = sum(sql_seconds.values()) - session_sql
    rows.append(("sessions report", f"{spark_seconds['sessions']:.1f}", f"{session_sql:.1f}"))
    rows.append(("traffic report", f"{spark_seconds['traffic']:.1f}", f"{traffic_sql:.1f}"))
    print(f"window {window}; Spark master {args.master}, JDBC partitions {args.partitions or 'default'}")
    print(table(rows, ("step", "Spark (s)", "plain SQL in PostgreSQL (s)")))
    print("SQL per query: " + ", ".join(f"{k} {v:.1f}s" for k, v in sql_seconds.items()))
    print(f"Spark found: {spark_found}")
    print(f"SQL found:   {found}")
    if spark_found != found:
        print("MISMATCH between Spark and SQL")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.spark_bench", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    filling = commands.add_parser("fill")
    filling.add_argument("--port", type=int, default=5450)
    filling.add_argument("--devices", type=int, default=12_000)
    filling.add_argument("--hours", type=float, default=24.0)
    filling.add_argument("--flapping", type=float, default=0.38)
    filling.add_argument("--apps", type=int, default=1)
    filling.add_argument("--period-scale", type=float, default=3.5)
    filling.set_defaults(func=fill)
    running = commands.add_parser("run")
    running.add_argument("--port", type=int, default=5450)
    running.add_argument("--hours", type=float, default=24.0, help="the fill's --hours (the window covers them)")
    running.add_argument("--master", default="local[2]")
    running.add_argument("--partitions", type=int, default=0)
    running.add_argument("--driver-memory", default="8g")
    running.add_argument("--out", default=str(ROOT / ".run" / "spark-bench"))
    running.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    running.set_defaults(func=run)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
