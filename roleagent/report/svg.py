"""Inline SVG charts drawn in Python for the HTML report (no JavaScript, no network).

Every text that reaches the SVG (titles, series labels, metric keys) is escaped with
:func:`html.escape`; values that are not finite numbers are left out of a line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

#: Line colours, one per run (a colour-blind-safe palette, Okabe and Ito, 2008).
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")

WIDTH, HEIGHT = 360, 210
LEFT, RIGHT, TOP, BOTTOM = 52, 10, 26, 30


@dataclass
class Series:
    label: str
    xs: list[float]
    ys: list[float | None]


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """About ``count`` round tick values covering [low, high]: ``nice_ticks(0, 1)`` →
    ``[0.0, 0.25, 0.5, 0.75, 1.0]``; ``nice_ticks(0, 7)`` → ``[0.0, 2.0, 4.0, 6.0, 8.0]``."""
    if high <= low:
        return [low]
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [round(k * step, 12) + 0.0 for k in range(first, last + 1)]


def _points(series: Series) -> list[tuple[float, float]]:
    return [
        (float(x), float(y))
        for x, y in zip(series.xs, series.ys)
        if isinstance(y, (int, float)) and not isinstance(y, bool) and math.isfinite(y)
    ]


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def line_chart(title: str, series: list[Series], *, x_label: str = "iteration", legend: bool | None = None) -> str:
    """One chart: a line (with dots) per series, shared axes, a legend (by default when
    there are several series).
    Returns ``""`` when no series has a finite point."""
    drawn = [(i, s, pts) for i, s in enumerate(series) if (pts := _points(s))]
    if not drawn:
        return ""
    show_legend = legend or (legend is None and len(series) > 1)
    top = TOP + (12 * len(drawn) if show_legend else 0)  # the legend sits above the plot
    height = HEIGHT + top - TOP
    xs = [x for _, _, pts in drawn for x, _ in pts]
    ys = [y for _, _, pts in drawn for _, y in pts]
    spread = abs(ys[0]) / 2 or 1.0  # a flat line sits mid-chart
    y_ticks = nice_ticks(min(ys), max(ys)) if max(ys) > min(ys) else []
    if len(y_ticks) < 2 or y_ticks[-1] <= y_ticks[0]:  # flat, or a spread below the ticks' rounding
        y_ticks = nice_ticks(ys[0] - spread, ys[0] + spread)
    x_lo, x_hi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y_lo, y_hi = y_ticks[0], y_ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - top - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return top + plot_h - (y - y_lo) / (y_hi - y_lo) * plot_h

    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}">',
        f'<text x="{LEFT}" y="15" class="title">{escape(title)}</text>',
    ]
    for tick in y_ticks:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py(tick):.1f}" y2="{py(tick):.1f}" class="grid"/>')
        parts.append(f'<text x="{LEFT - 4}" y="{py(tick) + 3:.1f}" class="tick" text-anchor="end">{tick:.6g}</text>')
    for tick in sorted({min(xs), max(xs), *(t for t in nice_ticks(x_lo, x_hi) if x_lo <= t <= x_hi)}):
        parts.append(
            f'<text x="{px(tick):.1f}" y="{height - BOTTOM + 13}" class="tick" text-anchor="middle">{_fmt(tick)}</text>'
        )
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{height - 4}" class="axis" text-anchor="middle">{x_label}</text>'
    )
    for i, s, pts in drawn:
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in pts:
            parts.append(
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}">'
                f"<title>{escape(s.label)}: {x_label} {_fmt(x)} → {y:.4g}</title></circle>"
            )
    if show_legend:
        for row, (i, s, _) in enumerate(drawn):
            y = TOP - 2 + 12 * row
            parts.append(f'<rect x="{LEFT + 6}" y="{y - 7}" width="10" height="3" fill="{COLOURS[i % len(COLOURS)]}"/>')
            parts.append(f'<text x="{LEFT + 20}" y="{y}" class="legend">{escape(s.label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def stacked_bars(title: str, rows: list[tuple[str, dict[str, float]]]) -> str:
    """Horizontal stacked bars, one per row (e.g. a run's mean seconds per phase), a legend
    of the parts below. Returns ``""`` when no row has a positive part."""
    names = list(dict.fromkeys(k for _, parts in rows for k, v in parts.items() if v > 0))
    total = max((sum(v for v in parts.values() if v > 0) for _, parts in rows), default=0.0)
    if not names or total <= 0:
        return ""
    width, bar_h, label_w = 560, 18, 150
    height = 24 + len(rows) * (bar_h + 8) + 16 * ((len(names) + 2) // 3) + 8
    out = [
        f'<svg class="chart bars" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<text x="4" y="15" class="title">{escape(title)}</text>',
    ]
    scale = (width - label_w - 60) / total
    for r, (label, parts) in enumerate(rows):
        y, x = 24 + r * (bar_h + 8), float(label_w)
        out.append(f'<text x="{label_w - 6}" y="{y + 13}" class="tick" text-anchor="end">{escape(label[:24])}</text>')
        for n, name in enumerate(names):
            value = parts.get(name, 0.0)
            if value > 0:
                out.append(
                    f'<rect x="{x:.1f}" y="{y}" width="{value * scale:.1f}" height="{bar_h}" '
                    f'fill="{COLOURS[n % len(COLOURS)]}"><title>{escape(name)}: {value:.3g} s</title></rect>'
                )
                x += value * scale
        out.append(f'<text x="{x + 4:.1f}" y="{y + 13}" class="tick">{sum(parts.values()):.3g} s</text>')
    legend_y = 24 + len(rows) * (bar_h + 8) + 8
    for n, name in enumerate(names):
        x, y = 4 + (n % 3) * 185, legend_y + 16 * (n // 3)
        out.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{COLOURS[n % len(COLOURS)]}"/>')
        out.append(f'<text x="{x + 14}" y="{y + 9}" class="legend">{escape(name)}</text>')
    out.append("</svg>")
    return "".join(out)
