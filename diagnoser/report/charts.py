"""The HTML report's charts: the bound against the observation, the step budget as a waterfall,
the bytes of the critical rank by component, and each cause's gain against its cap.

The TUI draws the same four; the page shows them as inline SVG (``diagnoser.report.svg``) so it
stays one self-contained file. The bound and the gains come from the diagnosis; the budget and
the bytes by component are not part of it, so the caller hands them over as ``ChartInputs``
(``diagnoser.chart_inputs`` reads them from a case). A chart with nothing to show is left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diagnoser.models.hypothesis import Diagnosis, Kind
from diagnoser.report.figures import ms, size
from diagnoser.report.svg import Row, Segment, bars


@dataclass(frozen=True)
class ChartInputs:
    """What the diagnosis does not carry: the budget's parts (ms, in path order) and the critical rank's bytes."""

    budget_title: str = ""
    budget_step_ms: float | None = None
    budget_parts: list[tuple[str, float]] = field(default_factory=list)
    components_title: str = ""
    components: list[tuple[str, float]] = field(default_factory=list)


def bound_chart(d: Diagnosis) -> str:
    b = d.bound
    if b is None or b.observed_step_ms is None:
        return ""
    unexplained = max(b.observed_step_ms - b.floor_ms, 0.0)
    rows = [
        Row("floor (the bound)", (Segment(0, b.floor_ms, "floor"),), f"{ms(b.floor_ms)} ({b.limited_by}-limited)"),
        Row("observed step", (Segment(0, min(b.floor_ms, b.observed_step_ms), "floor"), Segment(b.floor_ms, unexplained, "unexplained")),
            f"{ms(b.observed_step_ms)}, unexplained {ms(unexplained)}"),
    ]
    return bars("chart-bound", "The bound against the observed step", rows, (("floor", "explained by the floor"), ("unexplained", "unexplained")))


def budget_chart(inputs: ChartInputs) -> str:
    if not inputs.budget_parts or inputs.budget_step_ms is None:
        return ""
    rows, start = [], 0.0
    for name, part_ms in inputs.budget_parts:
        rows.append(Row(name, (Segment(start, part_ms, "part"),), ms(part_ms)))
        start += part_ms
    rows.append(Row("step", (Segment(0, inputs.budget_step_ms, "total"),), ms(inputs.budget_step_ms)))
    return bars("chart-budget", inputs.budget_title, rows)


def components_chart(inputs: ChartInputs) -> str:
    if not inputs.components:
        return ""
    rows = [Row(name, (Segment(0, n_bytes, "bytes"),), size(n_bytes)) for name, n_bytes in inputs.components]
    return bars("chart-components", inputs.components_title, rows)


def gains_chart(d: Diagnosis) -> str:
    """Each bounded cause: what it claims (light) and what it can remove once capped (dark)."""
    rows = []
    for h in d.of_kind(Kind.cause):
        if h.gain is None:
            continue
        claimed = max(h.claimed_ms or 0.0, h.gain.removable_ms)
        cap = f", capped by {h.gain.capped_by}" if h.gain.capped_by else ""
        rows.append(Row(h.id, (Segment(0, claimed, "claimed"), Segment(0, h.gain.removable_ms, "removable")),
                        f"{ms(h.gain.removable_ms)} of {ms(claimed)}{cap}"))
    if not rows:
        return ""
    return bars("chart-gains", "Gains against their caps (ms off the step)", rows, (("claimed", "time the cause claims"), ("removable", "at most removable")))


def charts_html(d: Diagnosis, inputs: ChartInputs | None) -> str:
    inputs = inputs or ChartInputs()
    drawn = [c for c in (bound_chart(d), budget_chart(inputs), components_chart(inputs), gains_chart(d)) if c]
    if not drawn:
        return ""
    return '<section id="charts"><h2>At a glance</h2>' + "".join(f'<figure>{c}</figure>' for c in drawn) + "</section>"
