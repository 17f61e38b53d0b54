"""What the HTML report's charts need from a case beyond the diagnosis: the step budget and the
bytes the critical rank moves by component.

Read here, outside the renderers, with the bound the CLI and the TUI already use, so the page
draws the same figures ``bound`` prints and the TUI's Bound and Evidence screens draw.
"""

from __future__ import annotations

from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.report.charts import ChartInputs
from diagnoser.whatif_inputs import budget_parts


def chart_inputs(case: Case) -> ChartInputs:
    parts: dict = {}
    budget = case.observations.budget
    if budget is not None:
        parts = dict(budget_title=f"Step budget, rank {budget.rank if budget.rank is not None else '?'} ({budget.source or 'no source given'})",
                     budget_step_ms=budget.step_ms, budget_parts=[(k, v) for k, v in budget_parts(budget).items() if v > 0])
    return ChartInputs(**parts, **_components(case))


def _components(case: Case) -> dict:
    from diagnoser.bound import compute_bound
    from diagnoser.engine.runner import incomplete_pin

    if case.workload is None or incomplete_pin(case) is not None:
        return {}
    try:
        report = compute_bound(case.workload)
    except InputError:  # the diagnosis already says why the pin gives no bound
        return {}
    critical = next(r for r in report.per_rank if r.rank == report.critical_rank)
    ordered = sorted(critical.components.items(), key=lambda item: -item[1])
    return dict(components_title=f"Bytes per decode step on rank {critical.rank}, the critical one", components=ordered)
