"""Follow-up questions a case raises, answered where the answer is "measure, don't assume".

A lesson fires when its situation holds (its cause concluded) or when the case records the
belief it corrects (``claims``). It adds no gain; it keeps a fix from being oversold.
"""

from diagnoser.engine import (
    AS,
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
    Speculation,
    ev,
    load_specs,
    rule,
)

from diagnoser.whatif import speculation

SPECS = load_specs(__file__)

# Below half of the ceiling people start asking whether this is "normal".
LOW_FRACTION = 0.5
# Budgets `diagnoser analyze` wrote come from a profiled run: a diagnostic, not a capacity test.
PROFILED = "diagnoser analyze"
# Demonstrated costs a first round of work removes, before layouts or speculation are compared.
FIX_FIRST = frozenset({"launch-gaps", "small-expert-kernels", "slow-kernel-path", "moe-untuned-config", "sort-sampling"})
# Beliefs about another layout, to be tested after that round.
LAYOUT_CLAIMS = frozenset({"ep_will_help", "smaller_tp_fewer_collectives"})


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

    @rule(
        SPECS["fix-demonstrated-first"],
        Holds(rule=P(lambda r: r in FIX_FIRST) & MATCH.cause, cap_ms=MATCH.cap, step_ms=MATCH.step),
        AS.s << Speculation(speedup=MATCH.speedup, expected_tokens=MATCH.tokens, ordinary_step_ms=MATCH.ordinary, cycle_ms=MATCH.cycle),
        TEST(lambda cap, step: cap is not None and step),
    )
    def speculation_after_fix(self, cause, cap, step, s, speedup, tokens, ordinary, cycle):
        """Only the ordinary step is shortened here; the cycle may shorten too, hence 'measure again'."""
        after = ordinary * (1 - cap / step)
        later = speculation(s["acceptance"], s["draft_length"], s["verify_ms"], s["draft_ms"], s["other_ms"], after).speedup
        return Finding(
            evidence=[ev("cause", cause), ev("speculation.speedup", speedup), ev("ordinary_step_after_fix_ms", after, "ms")],
            detail=(
                f"{cause} takes the ordinary step from {ordinary:.3g} to at most {after:.3g} ms; if the cycle kept its "
                f"{cycle:.3g} ms, speculation would give {tokens:.4g} x {after:.3g} / {cycle:.3g} = {later:.3f}x, "
                f"not {speedup:.3f}x."
            ),
        )

    @rule(
        SPECS["fix-demonstrated-first"],
        Holds(rule=P(lambda r: r in FIX_FIRST) & MATCH.cause),
        Claim(name=P(lambda c: c in LAYOUT_CLAIMS) & MATCH.claim),
    )
    def layout_after_fix(self, cause, claim):
        return Finding(evidence=[ev("cause", cause), ev("claims", claim)])
