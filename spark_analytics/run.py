"""Runs one report: check the source, start Spark, extract, transform, load; progress all along."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from spark_analytics import load, sources
from spark_analytics.errors import ReportError
from spark_analytics.options import Options
from spark_analytics.progress import Progress

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class Job(Protocol):
    NAME: str
    NEEDED: tuple[str, ...]  # tables the source must have

    def extract(self, spark: SparkSession, source: sources.Source, options: Options) -> dict[str, DataFrame]: ...

    def transform(self, frames: dict[str, DataFrame], options: Options) -> dict[str, DataFrame]: ...

    def page(self, tables: dict[str, DataFrame], source: sources.Source, options: Options) -> str: ...


def run(
    job: Job,
    source: sources.Source,
    options: Options,
    spark: SparkSession | None = None,
    master: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """Write every table and the page under options.out; returns the page's path."""
    from pyspark import StorageLevel

    progress = progress or Progress(total=4)
    with progress.step(f"check {source.id} ({', '.join(source.table(t) for t in job.NEEDED)})"):
        sources.check(source, job.NEEDED)
    with progress.step("start Spark"):
        session = spark or _session(master, options)
        progress.say(f"    master {session.sparkContext.master}, Spark {session.version}")
    progress.context = session.sparkContext
    try:
        options.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportError(f"--out {options.out}: cannot create it ({exc.strerror})", code=2) from None
    with progress.step(f"extract {options.window} from {source.id}"):
        frames = job.extract(session, source, options)
        # Read once, used by every transform: kept in memory, spilling to local disk.
        frames = {name: frame.persist(StorageLevel.MEMORY_AND_DISK) for name, frame in frames.items()}
        counts = {name: frame.count() for name, frame in frames.items()}
        progress.say("    " + ", ".join(f"{name}: {count:,} rows" for name, count in counts.items()))
    tables = job.transform(frames, options)
    progress.total += len(tables)
    stored: dict[str, DataFrame] = {}
    for name, frame in tables.items():
        with progress.step(f"{name} -> {options.out}/{name}.parquet, .csv"):
            stored[name] = load.write_table(frame, options.out, name)
    with progress.step("HTML page"):
        page = load.write_page(options.out, job.NAME, job.page(stored, source, options))
    # The extracted rows and what the job cached from them (stitched sessions, latency joins) go;
    # a report owns the session while it runs.
    session.catalog.clearCache()
    progress.finish(f"{job.NAME} report: {page}")
    return page


def _session(master: str | None, options: Options) -> SparkSession:
    from spark_analytics.spark import build_session

    return build_session(master, app="hookbridge-report", conf=options.conf)
