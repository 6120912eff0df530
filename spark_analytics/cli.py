"""`hookbridge report sessions|traffic ...` and `spark-submit spark_analytics/__main__.py ...`.

Nothing here imports PySpark at module level: the bridge's own CLI adds these arguments, and says
how to install the `spark` extra when PySpark is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from bridge.conf.registry import CommandPlugin
from spark_analytics.errors import ReportError

INSTALL_HINT = (
    "hookbridge report needs PySpark 3.5, which the bridge alone does not install: "
    "pip install 'hookbridge[spark]' (in a checkout: .venv/bin/pip install -e '.[spark]'), "
    "then fetch the connector jars once with `bash scripts/spark_jars.sh`"
)


def glue_times(argv: list[str]) -> list[str]:
    """`--from -24h` as `--from=-24h`: argparse takes a value starting with `-` for an option otherwise."""
    glued: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        if token in ("--from", "--to") and index + 1 < len(argv) and argv[index + 1].startswith("-"):
            glued.append(f"{token}={argv[index + 1]}")
            index += 2
            continue
        glued.append(token)
        index += 1
    return glued


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", choices=("sessions", "traffic"), help="which report")
    parser.add_argument("-c", "--config", default="config/bridge.conf", help="config file (its pools)")
    parser.add_argument("--source", required=True, help="<db>.<pool> to read, e.g. pgsql.pool1")
    parser.add_argument("--from", dest="start", required=True, help="ISO 8601 with offset, or -24h, -30m, now")
    parser.add_argument("--to", dest="end", default="now", help="ISO 8601 with offset, or relative (default now)")
    parser.add_argument("--out", required=True, help="folder for the Parquet, CSV and HTML files")
    parser.add_argument("--master", help="Spark master URL (default local[*], or spark-submit's)")
    parser.add_argument("--bucket", help="time bucket of the charts, e.g. 1m, 15m, 1h (default: from the window)")
    parser.add_argument("--prefix-depth", type=int, default=1, help="topic levels of a prefix (traffic; default 1)")
    parser.add_argument(
        "--storm-threshold",
        type=int,
        default=5,
        help="reconnects per hour above which a client is in a storm (sessions; default 5)",
    )
    parser.add_argument("--partitions", type=int, default=0, help="parallel JDBC reads (default: Spark's cores)")
    parser.add_argument("--top", type=int, default=25, help="rows per table on the HTML page (default 25)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("pyspark") is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    try:
        return _run(args)
    except ReportError as exc:
        print(f"report {args.report}: {exc}", file=sys.stderr)
        return exc.code


def _run(args: argparse.Namespace) -> int:
    from spark_analytics.jobs import REPORTS
    from spark_analytics.options import Options, parse_duration
    from spark_analytics.run import run as run_job
    from spark_analytics.sources import load_source
    from spark_analytics.window import parse_window

    window = parse_window(args.start, args.end)
    if args.prefix_depth < 1 or args.storm_threshold < 0 or args.partitions < 0 or args.top < 1:
        raise ReportError(
            "--prefix-depth and --top must be 1 or more, --storm-threshold and --partitions 0 or more", code=2
        )
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ReportError(f"--conf {item!r}: give KEY=VALUE", code=2)
        conf[key] = value
    options = Options(
        window=window,
        out=Path(args.out),
        bucket_s=parse_duration(args.bucket) if args.bucket else 0,
        prefix_depth=args.prefix_depth,
        storm_threshold=args.storm_threshold,
        partitions=args.partitions,
        top=args.top,
        conf=conf,
    )
    source = load_source(args.config, args.source)
    run_job(REPORTS[args.report], source, options, master=args.master)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark_analytics", description="hookbridge's Spark reports (docs/reports.md)")
    add_arguments(parser)
    return run(parser.parse_args(glue_times(sys.argv[1:] if argv is None else argv)))


# `hookbridge report ...`: found by the bridge's CLI through pyproject.toml's entry point
# `[project.entry-points."hookbridge.commands"] report = "spark_analytics.cli:COMMAND"`.
COMMAND = CommandPlugin(
    name="report",
    help="Spark analytics: sessions or traffic report",
    add_arguments=add_arguments,
    run=run,
    prepare_argv=glue_times,
)
