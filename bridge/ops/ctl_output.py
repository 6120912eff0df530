"""`hookbridge ctl`'s output for people: aligned tables, key/value pairs, times, and text made safe
for a terminal (`--json` prints the API's answers instead)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return shown(str(value))


def shown(text: str) -> str:
    """`text` for a terminal: a character that is not printable (a client id may hold control
    characters) as a Python-style escape, so that it cannot move the cursor and can be told apart."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], empty: str) -> str:
    """Rows as aligned columns with a header: (key, heading) per column."""
    if not rows:
        return empty
    cells = [[heading.upper() for _, heading in columns]]
    cells += [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def pairs(items: Iterable[tuple[str, Any]]) -> str:
    listed = [(key, _cell(value)) for key, value in items]
    width = max((len(key) for key, _ in listed), default=0)
    return "\n".join(f"{key.ljust(width)}  {value}" for key, value in listed)


def when(seconds: float | None) -> str:
    """A Unix time as people read it (UTC); None: for ever."""
    return "ever" if seconds is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))
