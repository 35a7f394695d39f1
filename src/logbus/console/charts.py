"""Line charts as inline SVG, drawn on the server so a page shows its plot with scripts off.

The plotted values are also in the markup (`data-values` on the polyline, oldest first), which is
what the browser tests read back from the live page.
"""

from __future__ import annotations

from markupsafe import Markup, escape

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 60, 10, 24, 24  # margins for the labels


def line_chart(chart_id: str, title: str, points: list[tuple[float, float]], now: float, window_s: float,
               unit: str) -> Markup:
    """`points` (epoch seconds, value) of the last `window_s` seconds before `now`, y from 0 to the maximum."""
    shown = [(at, value) for at, value in points if now - window_s <= at <= now]
    top = max((value for _, value in shown), default=0.0) or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def xy(at: float, value: float) -> str:
        x = LEFT + plot_w * (1 - (now - at) / window_s)
        y = TOP + plot_h * (1 - value / top)
        return f"{x:.1f},{y:.1f}"

    polyline = " ".join(xy(at, value) for at, value in shown)
    values = " ".join(_number(value) for _, value in shown)
    latest = _number(shown[-1][1]) if shown else "no samples yet"
    return Markup(
        f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}">'
        f'<text x="{LEFT}" y="16" class="title">{escape(title)} ({escape(unit)}): {latest}</text>'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" class="axis"/>'
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" class="axis"/>'
        f'<text x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{_number(top)}</text>'
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end">0</text>'
        f'<text x="{LEFT}" y="{HEIGHT - 6}">-{_duration(window_s)}</text>'
        f'<text x="{LEFT + plot_w}" y="{HEIGHT - 6}" text-anchor="end">now</text>'
        f'<polyline points="{polyline}" data-values="{values}" class="series"/>'
        "</svg>"
    )


def _number(value: float) -> str:
    return f"{value:.0f}" if value >= 100 or value == int(value) else f"{value:.2f}"


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 120 else f"{seconds:g} s"
