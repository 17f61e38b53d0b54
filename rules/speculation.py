"""Speculative decoding judged on accepted output per unit of cycle cost.

Fewer target invocations is not a win by itself: each cycle pays drafting, verification and
other work whether or not the drafts are accepted, and acceptance falls at long context or
on unfamiliar text.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    NOT,
    P,
    TEST,
    Finding,
    HostCostFact,
    RuleSet,
    Server,
    Speculation,
    W,
    ev,
    load_specs,
    rule,
)
from diagnoser.whatif import expected_tokens_per_cycle

from diagnoser.rules.comparison import ablation, ablation_finding

SPECS = load_specs(__file__)

# From this context on, verification of k+1 query tokens reads the whole KV each cycle.
LONG_CONTEXT = 8192
# Under 1.5 emitted tokens per cycle speculation cannot repay a typical cycle: verifying k+1 tokens
# costs at least one ordinary step and drafting adds to it (the reference cycle is 16 ms against a
# 9 ms step, 1.8 steps), and fewer than half a draft token per cycle is accepted, so most drafting
# is discarded work. (a = 0.2, k = 7 gives 1.25 tokens, a 0.70x slowdown at the reference's costs.)
MIN_TOKENS_PER_CYCLE = 1.5


class SpeculationRules(RuleSet):
    @rule(SPECS["speculation-slowdown"], *ablation("speculative"))
    def speculation_measured(self, d):
        """Speculation on is slower than off at the same load: drafting and verification cost more than they emit."""
        return ablation_finding(d)

    @rule(
        SPECS["speculation-slowdown"],
        AS.s << Speculation(speedup=MATCH.speedup, expected_tokens=MATCH.tokens, ordinary_step_ms=MATCH.ordinary),
        TEST(lambda speedup: speedup < 1),
    )
    def speculation_slowdown(self, s, speedup, tokens, ordinary):
        per_token = ordinary / speedup
        context = s.get("context")
        reason = "long context" if context is not None and context >= LONG_CONTEXT else "low acceptance or costly cycles"
        return Finding(
            evidence=[
                ev("speculation.acceptance", s["acceptance"]),
                ev("speculation.draft_length", s["draft_length"]),
                ev("expected_tokens_per_cycle", tokens),
                ev("speedup", speedup),
            ]
            + ([ev("speculation.context", context)] if context is not None else []),
            removable_ms=per_token - ordinary,
            step_ms=per_token,
            detail=f"{speedup:.2f}x is a slowdown ({reason}); gains are per emitted token.",
        )

    @rule(
        SPECS["speculation-slowdown"],
        AS.s << Speculation(acceptance=MATCH.a, draft_length=MATCH.k),
        TEST(lambda s, a, k: "speedup" not in s and expected_tokens_per_cycle(a, k) < MIN_TOKENS_PER_CYCLE),
    )
    def speculation_mostly_discarded(self, s, a, k):
        """Costs unknown: the accepted-prefix model alone says the drafts are mostly thrown away."""
        tokens = expected_tokens_per_cycle(a, k)
        return Finding(
            evidence=[ev("speculation.acceptance", a), ev("speculation.draft_length", k), ev("expected_tokens_per_cycle", tokens)],
            detail=(
                f"At acceptance {a:g} a cycle of {k} drafts emits {tokens:.3g} tokens: {(tokens - 1) / k:.0%} of the drafts "
                "are kept. Draft and verify times would bound the loss."
            ),
        )

    @rule(
        SPECS["speculation-slowdown"],
        AS.s << Speculation(acceptance=MATCH.a),
        NOT(Speculation(draft_length=W())),
        TEST(lambda a: a < 1 and 1 / (1 - a) < MIN_TOKENS_PER_CYCLE),
    )
    def speculation_discarded_at_any_length(self, s, a):
        """Draft length unknown: 1 + a + a^2 + ... stays below 1 / (1 - a) however many tokens are drafted,
        so a low enough acceptance condemns every draft length."""
        most = 1 / (1 - a)
        return Finding(
            evidence=[ev("speculation.acceptance", a), ev("expected_tokens_per_cycle_at_most", most)],
            detail=f"At acceptance {a:g} no draft length emits more than {most:.3g} tokens per cycle.",
        )

    @rule(
        SPECS["speculation-inactive-overhead"],
        Server(speculative=P(lambda m: bool(m)) & MATCH.method, speculative_active=False),
        NOT(HostCostFact(name="speculation", measured=True, ms_per_step=0)),
    )
    def speculation_inactive_overhead(self, method):
        """A speculation host cost measured at zero says the pipeline is off too: nothing to name."""
        return Finding(evidence=[ev("server.speculative", method), ev("server.speculative_active", False)])
