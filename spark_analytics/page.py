"""The self-contained HTML page of a report: headline figures, charts (inline SVG), the tables' first rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

STYLE = """
body { font-family: sans-serif; margin: 24px; color: #1a202c; max-width: 1100px; }
h1 { margin-bottom: 4px; } .meta { color: #4a5568; margin-bottom: 16px; }
.figures { display: flex; gap: 16px; flex-wrap: wrap; margin: 12px 0 20px; }
.figure { border: 1px solid #e2e8f0; border-radius: 6px; padding: 8px 14px; }
.figure b { display: block; font-size: 22px; }
table { border-collapse: collapse; margin: 6px 0 22px; font-size: 13px; }
th, td { border: 1px solid #e2e8f0; padding: 3px 8px; text-align: right; }
th { background: #f7fafc; } td.text { text-align: left; }
svg.chart { display: block; margin: 10px 0 18px; }
"""


@dataclass
class Page:
    title: str
    meta: str
    figures: list[tuple[str, str]] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)

    def chart(self, svg: str) -> None:
        self.parts.append(svg)

    def table(
        self, name: str, columns: Sequence[str], rows: Sequence[Sequence[object]], total: int | None = None
    ) -> None:
        head = "".join(f"<th>{escape(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
        more = f" (first {len(rows)} of {total})" if total is not None and total > len(rows) else ""
        self.parts.append(f"<h3>{escape(name)}{more}</h3><table><tr>{head}</tr>{body}</table>")

    def heading(self, text: str) -> None:
        self.parts.append(f"<h2>{escape(text)}</h2>")

    def render(self) -> str:
        figures = "".join(f'<div class="figure">{escape(k)}<b>{escape(v)}</b></div>' for k, v in self.figures)
        return (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(self.title)}</title>'
            f"<style>{STYLE}</style></head><body><h1>{escape(self.title)}</h1>"
            f'<div class="meta">{escape(self.meta)}</div><div class="figures">{figures}</div>'
            + "".join(self.parts)
            + "</body></html>"
        )


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"<td>{value:,.3f}</td>" if abs(value) < 1000 else f"<td>{value:,.0f}</td>"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"<td>{value:,}</td>"
    if isinstance(value, dt.datetime):
        return f'<td class="text">{value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")}</td>'
    return f'<td class="text">{escape("" if value is None else str(value))}</td>'
