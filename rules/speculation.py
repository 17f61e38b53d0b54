"""Speculative decoding judged on accepted output per unit of cycle cost.

Fewer target invocations is not a win by itself: each cycle pays drafting, verification and
other work whether or not the drafts are accepted, and acceptance falls at long context or
on unfamiliar text.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    TEST,
    Finding,
    RuleSet,
    Speculation,
    ev,
    load_specs,
    rule,
)

SPECS = load_specs(__file__)

# From this context on, verification of k+1 query tokens reads the whole KV each cycle.
LONG_CONTEXT = 8192


class SpeculationRules(RuleSet):
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
