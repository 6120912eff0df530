"""A report run's settings, from the command line (or a test)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from spark_analytics.errors import ReportError
from spark_analytics.window import Window

# Bucket sizes picked for the time charts: the smallest giving at most MAX_BUCKETS points.
STEPS = (10, 30, 60, 300, 600, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400)
MAX_BUCKETS = 400
_DURATION = re.compile(r"^(\d+)([smhd])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Options:
    window: Window
    out: Path
    bucket_s: int = 0  # 0: chosen from the window
    prefix_depth: int = 1
    storm_threshold: int = 5
    partitions: int = 0  # parallel JDBC reads; 0: Spark's default parallelism
    top: int = 25  # rows per table shown on the HTML page (the files have them all)
    conf: dict[str, str] = field(default_factory=dict)

    @property
    def bucket(self) -> int:
        if self.bucket_s:
            return self.bucket_s
        return next((s for s in STEPS if self.window.seconds / s <= MAX_BUCKETS), STEPS[-1])


def parse_duration(text: str) -> int:
    match = _DURATION.match(text.strip())
    if not match or int(match[1]) == 0:
        raise ReportError(f"--bucket {text!r}: give a duration such as 30s, 5m, 1h, 1d", code=2)
    return int(match[1]) * _SECONDS[match[2]]
