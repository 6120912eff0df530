"""What both reports' pages share: a window's description, rows of a table, durations for people."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_analytics.options import Options
    from spark_analytics.sources import Source


def meta(source: Source, options: Options) -> str:
    return f"source {source.id} ({source.db}), window {options.window}, buckets of {human(options.bucket)}"


def rows(frame: DataFrame, limit: int) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in frame.limit(limit).collect()]


def human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def aware(value: dt.datetime) -> dt.datetime:
    """PySpark hands timestamps back as naive local times."""
    return value.astimezone(dt.UTC)
