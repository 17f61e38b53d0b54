"""Horizontal bar charts as inline SVG: the one drawing primitive the HTML report's charts share.

A report is mailed and attached to tickets, so a chart must be part of the page: no script, no
font or stylesheet from elsewhere, and colours as attributes so a page whose stylesheet is stripped
(a mail client) keeps them. Every chart the report draws (bound against observation, the budget waterfall, bytes by
component, gains against their caps) is a list of rows, each a label, segments placed on one
shared scale and a figure printed after them; only what the rows hold differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

WIDTH = 720
LABEL_W = 190
TEXT_W = 230
ROW_H = 24
BAR_H = 16
TOP = 26
COLOURS = {
    "floor": "#2874a6",
    "unexplained": "#c0392b",
    "part": "#d68910",
    "total": "#1d2330",
    "bytes": "#2874a6",
    "removable": "#c0392b",
    "claimed": "#f5d5d0",
}


@dataclass(frozen=True)
class Segment:
    start: float
    length: float
    kind: str  # a key of COLOURS


@dataclass(frozen=True)
class Row:
    label: str
    segments: tuple[Segment, ...]
    text: str


def bars(chart_id: str, title: str, rows: list[Row], legend: tuple[tuple[str, str], ...] = ()) -> str:
    """One chart: ``title`` above, a row per ``Row`` on a scale from 0 to the largest segment end."""
    scale_max = max((s.start + s.length for r in rows for s in r.segments), default=0) or 1
    span = WIDTH - LABEL_W - TEXT_W
    height = TOP + ROW_H * len(rows) + (ROW_H if legend else 6)
    out = [
        f'<svg id="{escape(chart_id)}" class="chart" role="img" '
        f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" font-family="system-ui, sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<text x="0" y="16" font-size="13" font-weight="600" fill="#1d2330">{escape(title)}</text>',
    ]
    for i, row in enumerate(rows):
        y = TOP + i * ROW_H
        out.append(f'<text x="{LABEL_W - 8}" y="{y + BAR_H - 3}" text-anchor="end" fill="#1d2330">{escape(row.label)}</text>')
        end = LABEL_W
        for seg in row.segments:
            x = LABEL_W + span * seg.start / scale_max
            w = max(span * seg.length / scale_max, 1.0 if seg.length > 0 else 0.0)
            end = max(end, x + w)
            out.append(f'<rect class="{seg.kind}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{BAR_H}" fill="{COLOURS[seg.kind]}"/>')
        out.append(f'<text x="{end + 6:.1f}" y="{y + BAR_H - 3}" fill="#3b4252">{escape(row.text)}</text>')
    if legend:
        y = TOP + ROW_H * len(rows) + 4
        x = LABEL_W
        for kind, text in legend:
            out.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{COLOURS[kind]}"/>')
            out.append(f'<text x="{x + 16}" y="{y + 10}" fill="#3b4252">{escape(text)}</text>')
            x += 24 + 7 * len(text)
    out.append("</svg>")
    return "".join(out)
