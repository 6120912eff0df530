"""The SparkSession a report runs in: local jars only (never a download), UTC, quiet logs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from spark_analytics.errors import ReportError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[1]
# scripts/spark_jars.sh fills it; HOOKBRIDGE_SPARK_JARS points elsewhere (an installed bridge).
DEFAULT_JARS = ROOT / ".spark-jars"


def jars_dir() -> Path:
    return Path(os.environ.get("HOOKBRIDGE_SPARK_JARS", str(DEFAULT_JARS)))


def jar_paths(folder: Path | None = None) -> list[str]:
    where = folder or jars_dir()
    jars = sorted(str(path) for path in where.glob("*.jar"))
    if not jars:
        raise ReportError(
            f"no connector jars in {where}: run `bash scripts/spark_jars.sh` once (it fetches them from Maven "
            "Central and Debian), or point HOOKBRIDGE_SPARK_JARS at a folder that has them"
        )
    return jars


def build_session(
    master: str | None = None,
    app: str = "hookbridge-report",
    conf: Mapping[str, str] | None = None,
    jars: list[str] | None = None,
) -> SparkSession:
    """A new session, or the one spark-submit made (its master wins unless --master is given)."""
    from pyspark.sql import SparkSession

    if (master or "local").startswith("local"):
        # a local job talks to itself only: no "hostname resolves to a loopback address" warning
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    elif "SPARK_ENV_LOADED" not in os.environ and "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master("local[*]")  # docs/reports.md#running-it: local[*] unless told otherwise
    settings = {
        "spark.jars": ",".join(jars if jars is not None else jar_paths()),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # the report prints its own stage lines
        # Cassandra: joins on a table's full partition key become direct per-partition reads.
        "spark.sql.extensions": "com.datastax.spark.connector.CassandraSparkExtensions",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.shuffle.partitions": "8",
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
