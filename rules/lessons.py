"""Follow-up questions a case raises, answered where the answer is "measure, don't assume".

A lesson fires when its situation holds (its cause concluded) or when the case records the
belief it corrects (``claims``). It adds no gain; it keeps a fix from being oversold.
"""

from diagnoser.engine import (
    MATCH,
    OR,
    P,
    TEST,
    Bound,
    Budget,
    Claim,
    Finding,
    Holds,
    RuleSet,
    ev,
    load_specs,
    rule,
)

SPECS = load_specs(__file__)

# Below half of the ceiling people start asking whether this is "normal".
LOW_FRACTION = 0.5
# Budgets `diagnoser analyze` wrote come from a profiled run: a diagnostic, not a capacity test.
PROFILED = "diagnoser analyze"


class LessonRules(RuleSet):
    @rule(SPECS["low-fraction-not-a-diagnosis"], Bound(fraction_of_ceiling=MATCH.fraction), TEST(lambda fraction: fraction < LOW_FRACTION))
    def low_fraction(self, fraction):
        return Finding(evidence=[ev("bound.fraction_of_ceiling", fraction)])

    @rule(SPECS["low-fraction-not-a-diagnosis"], Claim(name="fraction_is_normal"))
    def fraction_claimed_normal(self):
        return Finding(evidence=[ev("claims", "fraction_is_normal")])

    @rule(SPECS["smaller-tp-same-calls"], OR(Holds(rule="exposed-comm"), Claim(name="smaller_tp_fewer_collectives")))
    def smaller_tp_same_calls(self):
        return Finding(evidence=[ev("trigger", "exposed communication or a claim about TP")])

    @rule(
        SPECS["graphs-remove-launch-share-only"],
        OR(Holds(rule="launch-gaps"), Claim(name="graphs_close_gap")),
        Budget(launch_ms=MATCH.launch, step_ms=MATCH.step),
    )
    def graphs_launch_share(self, launch, step):
        best = step / max(step - launch, 1e-9)
        return Finding(
            evidence=[ev("budget.launch_ms", launch, "ms"), ev("budget.step_ms", step, "ms")],
            detail=f"Here that is at most {launch:.3g} of {step:.3g} ms: {best:.3f}x even if every launch gap vanished.",
        )

    @rule(SPECS["sparsity-is-not-ep"], OR(Holds(rule="small-expert-kernels"), Claim(name="ep_will_help")))
    def sparsity_is_not_ep(self):
        return Finding(evidence=[ev("trigger", "small expert kernels or a claim that EP will help")])

    @rule(SPECS["sampling-not-necessarily-cpu"], OR(Holds(rule="host-overhead"), Claim(name="sampling_on_cpu")))
    def sampling_inspect(self):
        return Finding(evidence=[ev("trigger", "host overhead or a claim that sampling runs on the CPU")])

    @rule(
        SPECS["diagnostics-not-capacity"],
        OR(Holds(rule=MATCH.cause), Claim(name="trace_rate_is_capacity")),
        Budget(source=P(lambda source: source.startswith(PROFILED)) & MATCH.source),
    )
    def diagnostics_not_capacity(self, source):
        return Finding(evidence=[ev("budget.source", source)])
