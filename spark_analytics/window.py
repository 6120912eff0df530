"""The report's time window: `--from` / `--to` as ISO 8601 with an offset, or relative (`-24h`, `now`)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from spark_analytics.errors import ReportError

_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True, slots=True)
class Window:
    """[start, end): both aware UTC datetimes."""

    start: dt.datetime
    end: dt.datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def days(self) -> list[dt.date]:
        """Every UTC day the window touches (Cassandra's event_log partition key)."""
        first, last = self.start.date(), (self.end - dt.timedelta(microseconds=1)).date()
        return [first + dt.timedelta(days=n) for n in range((last - first).days + 1)]

    def __str__(self) -> str:
        return f"{self.start.isoformat()} .. {self.end.isoformat()}"


def parse_time(text: str, now: dt.datetime, option: str) -> dt.datetime:
    """`now`, `-90m`/`-24h`/`-7d`, or ISO 8601 with an offset (`2026-05-01T00:00:00+02:00`, `...Z`)."""
    value = text.strip()
    if value == "now":
        return now
    relative = _RELATIVE.match(value)
    if relative:
        return now - dt.timedelta(seconds=float(relative[1]) * _UNIT_SECONDS[relative[2]])
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ReportError(
            f"{option} {text!r}: not a time; give ISO 8601 with an offset (2026-05-01T00:00:00Z), "
            "or relative to now (-24h, -30m, -7d, now)",
            code=2,
        ) from None
    if parsed.tzinfo is None:
        # A time without an offset would mean the local zone of whichever machine runs the job.
        raise ReportError(f"{option} {text!r}: add a UTC offset (Z or +02:00): a bare time is ambiguous", code=2)
    return parsed.astimezone(dt.UTC)


def parse_window(start: str, end: str, now: dt.datetime | None = None) -> Window:
    current = now or dt.datetime.now(dt.UTC)
    window = Window(parse_time(start, current, "--from"), parse_time(end, current, "--to"))
    if window.end <= window.start:
        raise ReportError(f"empty window: --from {start!r} is not before --to {end!r} ({window})", code=2)
    return window
