"""The what-if calculators' inputs read from a case, for the CLI and the TUI alike.

The calculators in ``diagnoser.whatif`` take plain numbers; a case holds them in its step
budget and its speculation counters. Reading them in one place keeps ``whatif amdahl --case``
and the TUI's prefilled calculators from drifting apart.
"""

from __future__ import annotations

from typing import Any

from diagnoser.models.case import Case
from diagnoser.models.observations import StepBudget

BUDGET_PARTS = ("device", "exposed_comm", "launch", "queue", "host")


def budget_parts(budget: StepBudget) -> dict[str, float]:
    """The budget's non-overlapping parts, as Amdahl's ``parts_ms``."""
    return {name: getattr(budget, f"{name}_ms") for name in BUDGET_PARTS}


def speculation_inputs(case: Case, reference_step_ms: float | None) -> dict[str, Any]:
    """What the case already says about speculation; the ordinary step defaults to the reference step."""
    spec = case.observations.speculation
    known: dict[str, Any] = {"ordinary_step_ms": reference_step_ms}
    if spec is not None:
        known.update(
            acceptance=spec.acceptance,
            draft_length=spec.draft_length,
            verify_ms=spec.verify_ms,
            draft_ms=spec.draft_ms,
            other_ms=spec.other_ms,
        )
        if spec.ordinary_step_ms is not None:
            known["ordinary_step_ms"] = spec.ordinary_step_ms
    return {key: value for key, value in known.items() if value is not None}

