"""The gap before attribution: what to say when only the bound and one step time are known.

A floor that covers a quarter of the step tells us how much is unexplained, not why. These
rules refuse to name a cause and ask for the measurement that would.
"""

from diagnoser.engine import (
    MATCH,
    NOT,
    TEST,
    Bound,
    Budget,
    Finding,
    RuleSet,
    ev,
    load_specs,
    rule,
)

SPECS = load_specs(__file__)

# Below a tenth of the step, an unexplained remainder is within step-to-step noise.
NOISE_FRACTION = 0.1
# A budget is trusted to within 15 % of the step before we call a remainder missing work.
BUDGET_TOLERANCE = 0.15


class GapRules(RuleSet):
    @rule(
        SPECS["unexplained-gap"],
        Bound(floor_ms=MATCH.floor, observed_step_ms=MATCH.observed, unexplained_ms=MATCH.unexplained),
        NOT(Budget()),
        TEST(lambda unexplained, observed: unexplained > NOISE_FRACTION * observed),
    )
    def unexplained_gap(self, floor, observed, unexplained):
        return Finding(
            evidence=[
                ev("bound.floor_ms", floor, "ms"),
                ev("bound.observed_step_ms", observed, "ms"),
                ev("bound.unexplained_ms", unexplained, "ms"),
            ],
            detail=(
                f"The floor accounts for {floor:.3g} of {observed:.3g} ms: unexplained {unexplained:.3g} ms. "
                "No cause named yet: get a trace / run probes."
            ),
        )

    @rule(
        SPECS["budget-unattributed"],
        Budget(step_ms=MATCH.step, parts_ms=MATCH.parts, unattributed_ms=MATCH.missing),
        TEST(lambda missing, step: missing > BUDGET_TOLERANCE * step),
    )
    def budget_unattributed(self, step, parts, missing):
        return Finding(
            evidence=[ev("budget.step_ms", step, "ms"), ev("budget.parts_ms", parts, "ms")],
            detail=f"{missing:.3g} ms of the {step:.3g} ms step is in no part.",
        )
