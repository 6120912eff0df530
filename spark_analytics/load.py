"""Load: every table as Parquet and CSV under the output folder, and the HTML page beside them.

    DIR/<report>.html
    DIR/<table>.parquet/    (a Spark Parquet folder)
    DIR/<table>.csv         (one file with a header row)

A table is computed once: written as Parquet, then the CSV and the page's rows are read back from
that Parquet (a transform over millions of rows is never run three times).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def write_table(frame: DataFrame, out: Path, name: str) -> DataFrame:
    """Write one table; returns it as read back from its Parquet."""
    parquet = out / f"{name}.parquet"
    # One file: the tables are ordered (busiest topic first...), and reading several part files back
    # would not keep that order. coalesce(1) joins the sorted partitions in order, without a shuffle.
    frame.coalesce(1).write.mode("overwrite").parquet(str(parquet))
    stored = frame.sparkSession.read.parquet(str(parquet))
    _write_csv(stored, out / f"{name}.csv")
    return stored


def _write_csv(frame: DataFrame, target: Path) -> None:
    # Spark writes a folder of part files; one partition gives one part, moved to a plain file.
    with tempfile.TemporaryDirectory(prefix=".csv-", dir=target.parent) as tmp:
        folder = Path(tmp) / "csv"
        frame.coalesce(1).write.option("header", "true").option(
            "timestampFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"
        ).csv(str(folder))
        part = next(folder.glob("part-*.csv"))
        shutil.move(str(part), target)


def read_table(spark: SparkSession, out: Path, name: str) -> DataFrame:
    return spark.read.parquet(str(out / f"{name}.parquet"))


def write_page(out: Path, report: str, html: str) -> Path:
    target = out / f"{report}.html"
    target.write_text(html, encoding="utf-8")
    return target
