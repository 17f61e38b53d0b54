"""The gap before attribution: what to say when only the bound and one step time are known.

A floor that covers a quarter of the step tells us how much is unexplained, not why. These
rules refuse to name a cause and ask for the measurement that would.
"""

from diagnoser.engine import MATCH, NOT, TEST, Bound, Budget, Check, Finding, Kind, RuleSet, RuleSpec, ev, rule

UNEXPLAINED_GAP = RuleSpec(
    id="unexplained-gap",
    title="Time above the bound that nothing attributes yet",
    kind=Kind.check,
    requires=("bound",),
    explanation=(
        "The recomputed floor covers only part of the measured step, and the case has no step budget. "
        "A gap this size is a question, not a diagnosis."
    ),
    check=Check(
        measure="trace ~20 representative decode steps on every rank (diagnoser analyze) and run diagnoser probe",
        confirms="the budget's non-overlapping parts add up to the step and one of them holds the unexplained time",
        refutes="with a per-rank byte count and the measured bandwidth, the floor moves close to the observed step",
    ),
)

UNATTRIBUTED_BUDGET = RuleSpec(
    id="budget-unattributed",
    title="Part of the step budget is attributed to nothing",
    kind=Kind.check,
    requires=("budget",),
    explanation="The budget's parts fall short of the measured step, so some critical-path time has no owner yet.",
    check=Check(
        measure="re-run diagnoser analyze over the same steps with host (CPU) sampling and all streams enabled",
        confirms="the missing time appears as host, queue or communication time on the critical rank",
        refutes="the parts add up once the window covers whole steps (step boundaries were misplaced)",
    ),
)

# Below a tenth of the step, an unexplained remainder is within step-to-step noise.
NOISE_FRACTION = 0.1
# A budget is trusted to within 15 % of the step before we call a remainder missing work.
BUDGET_TOLERANCE = 0.15


class GapRules(RuleSet):
    @rule(
        UNEXPLAINED_GAP,
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
        UNATTRIBUTED_BUDGET,
        Budget(step_ms=MATCH.step, parts_ms=MATCH.parts, unattributed_ms=MATCH.missing),
        TEST(lambda missing, step: missing > BUDGET_TOLERANCE * step),
    )
    def budget_unattributed(self, step, parts, missing):
        return Finding(
            evidence=[ev("budget.step_ms", step, "ms"), ev("budget.parts_ms", parts, "ms")],
            detail=f"{missing:.3g} ms of the {step:.3g} ms step is in no part.",
        )
