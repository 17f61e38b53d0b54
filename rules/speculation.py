"""Speculative decoding judged on accepted output per unit of cycle cost.

Fewer target invocations is not a win by itself: each cycle pays drafting, verification and
other work whether or not the drafts are accepted, and acceptance falls at long context or
on unfamiliar text.
"""

from diagnoser.engine import AS, MATCH, TEST, Check, Finding, RemedySpec, RuleSet, RuleSpec, Speculation, ev, rule, undo

# From this context on, verification of k+1 query tokens reads the whole KV each cycle.
LONG_CONTEXT = 8192

SPECULATION_SLOWDOWN = RuleSpec(
    id="speculation-slowdown",
    title="Speculation costs more than it emits",
    requires=("speculation",),
    report_missing=False,
    explanation="Expected emitted tokens per cycle times the ordinary step is less than the cycle's draft + verify + other cost.",
    check=Check(
        measure="accepted tokens per cycle, draft time, verify time and memory, measured together at the served load",
        confirms="turning speculation off shortens the per-token time at the same load and context",
        refutes="measured acceptance is higher than assumed and the per-token time is lower with speculation",
    ),
    remedies=(
        RemedySpec(action="turn speculation off for this load/context, or shorten the draft length", cost="configuration", risk="loses the win at low load/short context"),
    ),
    undo=(
        undo("per_user_latency", "per-token latency without speculation is higher at the served load"),
        undo("useful_throughput", "aggregate tokens/s falls"),
    ),
)


class SpeculationRules(RuleSet):
    @rule(
        SPECULATION_SLOWDOWN,
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
