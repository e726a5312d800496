"""Line charts as inline SVG, drawn on the server: pages need no chart library and work without JavaScript."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from markupsafe import Markup, escape

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 12, 28
COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")


def _label(value: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def line_chart(series: Sequence[tuple[str, Sequence[tuple[int, float]]]], title: str) -> Markup:
    """`series`: (name, [(ts_ms, value), ...]); at most eight lines, the rest left out and said so."""
    points = [p for _, s in series for p in s]
    if not points:
        return Markup('<p class="muted">no history yet for this chart</p>')
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    top = max(max(p[1] for p in points), 1)
    span = max(t1 - t0, 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(ts: int) -> float:
        return LEFT + (ts - t0) / span * plot_w

    def y(value: float) -> float:
        return TOP + plot_h - value / top * plot_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
    ]
    for fraction in (0, 0.5, 1):
        level = top * fraction
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(level):.1f}" y2="{y(level):.1f}" class="grid"/>'
            f'<text x="{LEFT - 6}" y="{y(level) + 4:.1f}" text-anchor="end">{_label(level)}</text>'
        )
    for ts, anchor in ((t0, "start"), (t1, "end")):
        stamp = datetime.fromtimestamp(ts / 1000).strftime("%m-%d %H:%M:%S")
        parts.append(f'<text x="{x(ts):.1f}" y="{HEIGHT - 8}" text-anchor="{anchor}">{stamp}</text>')
    shown = list(series)[: len(COLOURS)]
    for (name, values), colour in zip(shown, COLOURS, strict=False):
        path = " ".join(f"{x(ts):.1f},{y(v):.1f}" for ts, v in values)
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}">'
            f"<title>{escape(name)}</title></polyline>"
        )
    parts.append("</svg>")
    legend = "".join(
        f'<span class="legend"><i style="background:{c}"></i>{escape(n)}</span>'
        for (n, _), c in zip(shown, COLOURS, strict=False)
    )
    if len(series) > len(shown):
        legend += f'<span class="muted">and {len(series) - len(shown)} more (see the table)</span>'
    return Markup("".join(parts) + f'<div class="legend-row">{legend}</div>')
