"""Small inline SVG charts for the HTML report: bars (requests per minute) and a line with marks (loss
per step with the policy refreshes, latency over the run). No script, no fetch: plain SVG the page
carries. Every label is escaped (the numbers come from the run directory)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

__all__ = ["bar_chart", "line_chart"]

WIDTH, HEIGHT = 560, 180
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 22, 30
AXIS = "#888"
BAR = "#4e79a7"
LINE = "#e15759"
MARK = "#59a14f"


def _e(s: object) -> str:
    return html.escape(str(s), quote=True)


def _num(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000 or abs(v) < 0.01:
        return f"{v:.3g}"
    return f"{v:.3f}".rstrip("0").rstrip(".")


def _frame(title: str, chart_id: str, css: str, x_label: str, y_label: str, y_max: float, y_min: float) -> list[str]:
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    return [
        f'<svg class="chart {_e(css)}" id="{_e(chart_id)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{_e(title)}">',
        f"<title>{_e(title)}</title>",
        f'<text x="{LEFT}" y="14" font-size="12" font-weight="600">{_e(title)}</text>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + h}" stroke="{AXIS}"/>',
        f'<line x1="{LEFT}" y1="{TOP + h}" x2="{LEFT + w}" y2="{TOP + h}" stroke="{AXIS}"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 8}" font-size="10" text-anchor="end">{_e(_num(y_max))}</text>',
        f'<text x="{LEFT - 4}" y="{TOP + h}" font-size="10" text-anchor="end">{_e(_num(y_min))}</text>',
        f'<text x="{LEFT + w}" y="{HEIGHT - 6}" font-size="10" text-anchor="end">{_e(x_label)}</text>',
        f'<text x="4" y="{TOP + h // 2}" font-size="10">{_e(y_label)}</text>',
    ]


def bar_chart(values: Sequence[float], *, title: str, chart_id: str, x_label: str, y_label: str) -> str:
    """One bar per value (e.g. requests per minute), left to right."""
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = max(values, default=0) or 1
    parts = _frame(title, chart_id, "bars", x_label, y_label, top, 0)
    n = max(1, len(values))
    step = w / n
    for i, v in enumerate(values):
        bh = h * v / top
        parts.append(
            f'<rect class="bar" data-value="{_e(_num(v))}" x="{LEFT + i * step + 0.5:.1f}" y="{TOP + h - bh:.1f}" '
            f'width="{max(1.0, step - 1):.1f}" height="{bh:.1f}" fill="{BAR}"><title>{_e(_num(v))}</title></rect>'
        )
    parts.append("</svg>")
    return "".join(parts)


def line_chart(
    points: Sequence[tuple[float, float | None]],
    *,
    title: str,
    chart_id: str,
    x_label: str,
    y_label: str,
    marks: Sequence[float] = (),
    mark_label: str = "",
) -> str:
    """A line through ``points`` (x, y; a None y leaves a gap), with vertical ``marks`` at x values."""
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    ys = [y for _, y in points if y is not None and math.isfinite(y)]
    xs = [x for x, _ in points] + list(marks)
    y_min, y_max = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if y_max == y_min:
        y_max, y_min = y_max + 1, y_min - (1 if y_min != 0 else 0)
    x_min, x_max = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x_max == x_min:
        x_max = x_min + 1

    def px(x: float) -> float:
        return LEFT + w * (x - x_min) / (x_max - x_min)

    def py(y: float) -> float:
        return TOP + h - h * (y - y_min) / (y_max - y_min)

    parts = _frame(title, chart_id, "line", x_label, y_label, y_max, y_min)
    parts.append(f'<text x="{LEFT}" y="{HEIGHT - 6}" font-size="10">{_e(_num(x_min))}</text>')
    for x in marks:
        parts.append(
            f'<line class="mark" x1="{px(x):.1f}" y1="{TOP}" x2="{px(x):.1f}" y2="{TOP + h}" stroke="{MARK}" '
            f'stroke-dasharray="3,3"><title>{_e(mark_label)} {_e(_num(x))}</title></line>'
        )
    run: list[str] = []
    for x, y in [*points, (math.nan, None)]:
        if y is None or not math.isfinite(y) or not math.isfinite(x):
            if run:
                parts.append(f'<polyline fill="none" stroke="{LINE}" stroke-width="1.5" points="{" ".join(run)}"/>')
            run = []
            continue
        run.append(f"{px(x):.1f},{py(y):.1f}")
    for x, y in points:
        if y is not None and math.isfinite(y):
            parts.append(
                f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="2" fill="{LINE}">'
                f"<title>{_e(_num(x))}: {_e(_num(y))}</title></circle>"
            )
    if marks and mark_label:
        parts.append(
            f'<text x="{LEFT + w}" y="{TOP - 8}" font-size="10" text-anchor="end" fill="{MARK}">'
            f"- - {_e(mark_label)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
