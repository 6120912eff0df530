"""Inline SVG charts, built by hand: the HTML report must open with no network (no CDN, no JS library).

Each function returns one `<svg>` element with class `chart`; the headless-browser test counts them.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 860, 280
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 30, 50
COLOR = "#2b6cb0"
ACCENT = "#dd6b20"


def _number(value: float) -> str:
    if abs(value) >= 1e9:
        return f"{value / 1e9:.1f}G"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.1f}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.0f}k"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def nice_top(value: float) -> float:
    """The axis top: the smallest 1, 2, 2.5 or 5 x 10^k at or above `value` (ticks at quarters read well)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value)


def _frame(title: str, body: list[str], ymax: float) -> str:
    plot_h = HEIGHT - TOP - BOTTOM
    grid = []
    for step in range(5):
        value = ymax * step / 4
        y = TOP + plot_h - plot_h * step / 4
        grid.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>')
        grid.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{_number(value)}</text>')
    return (
        f'<svg class="chart" role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif">'
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>'
        + "".join(grid)
        + "".join(body)
        + f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM}" stroke="#4a5568"/>'
        + "</svg>"
    )


def _empty(title: str) -> str:
    return _frame(
        title,
        [f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" fill="#718096">no data in this window</text>'],
        1,
    )


def _time_label(at: dt.datetime, span: float) -> str:
    return at.strftime("%H:%M" if span <= 2 * 86400 else "%m-%d %H:%M")


def line(title: str, points: Sequence[tuple[dt.datetime, float]], area: bool = True) -> str:
    """A time series (the online curve, messages per bucket)."""
    if not points:
        return _empty(title)
    ymax = nice_top(max(v for _, v in points))
    first, last = points[0][0], points[-1][0]
    span = max((last - first).total_seconds(), 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def xy(at: dt.datetime, value: float) -> tuple[float, float]:
        return LEFT + plot_w * (at - first).total_seconds() / span, TOP + plot_h - plot_h * value / ymax

    coords = [xy(at, value) for at, value in points]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    body = []
    if area:
        base = TOP + plot_h
        body.append(
            f'<polygon points="{coords[0][0]:.1f},{base} {path} {coords[-1][0]:.1f},{base}" '
            f'fill="{COLOR}" fill-opacity="0.15"/>'
        )
    body.append(f'<polyline class="series" points="{path}" fill="none" stroke="{COLOR}" stroke-width="2"/>')
    for n in range(6):
        at = first + dt.timedelta(seconds=span * n / 5)
        x, _ = xy(at, 0)
        body.append(
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle" font-size="11">'
            f"{_time_label(at, span)}</text>"
        )
    return _frame(title, body, ymax)


def bars(title: str, items: Sequence[tuple[str, float]], color: str = COLOR) -> str:
    """Vertical bars with labels under them (traffic per topic, per node, a histogram)."""
    if not items:
        return _empty(title)
    ymax = nice_top(max(v for _, v in items))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / len(items)
    body = []
    for n, (label, value) in enumerate(items):
        height = plot_h * value / ymax
        x = LEFT + n * slot + slot * 0.1
        body.append(
            f'<rect class="bar" x="{x:.1f}" y="{TOP + plot_h - height:.1f}" width="{slot * 0.8:.1f}" '
            f'height="{height:.1f}" fill="{color}"><title>{escape(label)}: {_number(value)}</title></rect>'
        )
        short = label if len(label) <= 18 else "…" + label[-17:]  # a topic's end tells it apart
        body.append(
            f'<text x="{x + slot * 0.4:.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="end" font-size="10" '
            f'transform="rotate(-25 {x + slot * 0.4:.1f} {HEIGHT - BOTTOM + 14})">{escape(short)}</text>'
        )
    return _frame(title, body, ymax)
