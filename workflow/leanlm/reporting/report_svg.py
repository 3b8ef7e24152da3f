"""A claim part's effect and 95% interval drawn against the effects the claim allows, as inline SVG for
report.html (leanlm.reporting.report_page).

One horizontal axis: the allowed region shaded (a bound at infinity drawn open: the shading runs off the
edge under an arrow, with no closing line), the no-effect value dashed (0 for a difference, 1 for a ratio
or a factor), the interval as a bar with end ticks and the estimate as a dot. Only numbers reach the
markup, so it needs no escaping beyond the title text.
"""

from __future__ import annotations

import math
from html import escape

from markupsafe import Markup

WIDTH, HEIGHT = 280, 38
MARGIN = 10          # px at each end, where an open region's arrow sits
AXIS_Y, BAR_Y = 30, 16
NO_EFFECT = {"difference": 0.0, "ratio": 1.0, "factor": 1.0}
COLOURS = {"region": "#cfe8cf", "region_edge": "#3c8d3c", "interval": "#1f3b73", "no_effect": "#888"}


def _finite(*values) -> list[float]:
    return [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))
            and math.isfinite(float(v))]


def _num(x: float) -> str:
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:.3g}"


def axis_range(low: float, high: float, estimate: float, region: tuple[float, float], effect: str) -> tuple[float, float]:
    """The values the axis spans: the interval, the estimate, the region's finite bounds and the no-effect
    value, with a tenth of the span (or 1 where all coincide) to spare at each end."""
    values = _finite(low, high, estimate, *region, NO_EFFECT.get(effect))
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.1 or 1.0
    return lo - pad, hi + pad


def interval_svg(estimate: float, low: float, high: float, region: tuple[float, float], effect: str) -> Markup:
    """The SVG of one part; ``region`` is (region_low, region_high), either possibly infinite."""
    lo, hi = axis_range(low, high, estimate, region, effect)

    def x(value: float) -> float:
        if math.isinf(value):
            return float(MARGIN if value < 0 else WIDTH - MARGIN)
        return MARGIN + (value - lo) / (hi - lo) * (WIDTH - 2 * MARGIN)

    r0, r1 = (float(v) for v in region)
    x0, x1 = x(max(r0, lo) if math.isfinite(r0) else r0), x(min(r1, hi) if math.isfinite(r1) else r1)
    # an open end reaches the picture's edge, under an arrow pointing off it
    left, right = (0.0 if math.isinf(r0) else x0), (float(WIDTH) if math.isinf(r1) else x1)
    title = (f"{effect}: estimate {_num(estimate)}, 95% interval [{_num(low)}, {_num(high)}]; "
             f"the claim allows ({_num(r0)}, {_num(r1)})")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="interval" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img">', f"<title>{escape(title)}</title>",
             f'<rect class="region" x="{left:.1f}" y="4" width="{max(right - left, 0):.1f}" height="{AXIS_Y - 4}" '
             f'fill="{COLOURS["region"]}"/>']
    for bound, pos in ((r0, x0), (r1, x1)):
        if math.isfinite(bound) and lo <= bound <= hi:  # a closed end: a solid edge
            parts.append(f'<line class="bound" x1="{pos:.1f}" x2="{pos:.1f}" y1="4" y2="{AXIS_Y}" '
                         f'stroke="{COLOURS["region_edge"]}" stroke-width="1.5"/>')
        elif math.isinf(bound):  # an open end: an arrow off the edge
            tip, back = (1.0, 8.0) if bound < 0 else (WIDTH - 1.0, WIDTH - 8.0)
            parts.append(f'<polygon class="open" points="{tip},{AXIS_Y - 13} {back},{AXIS_Y - 17} {back},{AXIS_Y - 9}" '
                         f'fill="{COLOURS["region_edge"]}"/>')
    if effect in NO_EFFECT:
        z = x(NO_EFFECT[effect])
        parts.append(f'<line class="no-effect" x1="{z:.1f}" x2="{z:.1f}" y1="2" y2="{AXIS_Y}" '
                     f'stroke="{COLOURS["no_effect"]}" stroke-dasharray="3,2"/>')
    parts.append(f'<line class="axis" x1="0" x2="{WIDTH}" y1="{AXIS_Y}" y2="{AXIS_Y}" stroke="#444"/>')
    a, b, e = x(low), x(high), x(estimate)
    parts += [f'<line class="ci" x1="{a:.1f}" x2="{b:.1f}" y1="{BAR_Y}" y2="{BAR_Y}" '
              f'stroke="{COLOURS["interval"]}" stroke-width="2"/>',
              *(f'<line x1="{p:.1f}" x2="{p:.1f}" y1="{BAR_Y - 5}" y2="{BAR_Y + 5}" stroke="{COLOURS["interval"]}" '
                f'stroke-width="2"/>' for p in (a, b)),
              f'<circle class="estimate" cx="{e:.1f}" cy="{BAR_Y}" r="3.5" fill="{COLOURS["interval"]}"/>',
              f'<text x="2" y="{HEIGHT - 0.5}" font-size="8" fill="#444">{_num(lo)}</text>',
              f'<text x="{WIDTH - 2}" y="{HEIGHT - 0.5}" font-size="8" fill="#444" text-anchor="end">{_num(hi)}</text>',
              "</svg>"]
    return Markup("".join(parts))
