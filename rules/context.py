"""Slowdown at long context: KV, indexer or attention work that grows with the context.

Some growth is expected (the bound counts KV reads); a rule fires when the step grows by a
large factor for the same output work, and asks whether the bound grows as much.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    TEST,
    ContextSweep,
    Finding,
    KernelClass,
    RuleSet,
    ev,
    load_specs,
    rule,
)

SPECS = load_specs(__file__)

# A 30 % longer step across the sweep is more than noise and worth attributing.
GROWTH = 1.3
# Attention below half of peak bandwidth at long context is a backend question.
ATTENTION_BW = 0.5


class ContextRules(RuleSet):
    @rule(SPECS["long-context-slowdown"], AS.s << ContextSweep(growth=MATCH.growth), TEST(lambda growth: growth >= GROWTH))
    def long_context_slowdown(self, s, growth):
        return Finding(
            evidence=[
                ev("context_sweep.context_lo", s["context_lo"]),
                ev("context_sweep.step_lo_ms", s["step_lo_ms"], "ms"),
                ev("context_sweep.context_hi", s["context_hi"]),
                ev("context_sweep.step_hi_ms", s["step_hi_ms"], "ms"),
            ],
            removable_ms=s["step_hi_ms"] - s["step_lo_ms"],
            step_ms=s["step_hi_ms"],
            detail=f"The step grows {growth:.2f}x from context {s['context_lo']} to {s['context_hi']}; gains refer to the longest context.",
        )

    @rule(
        SPECS["slow-attention-backend"],
        KernelClass(kernel_class="attention", backend=MATCH.backend, achieved_bw_fraction=MATCH.frac),
        TEST(lambda frac: frac < ATTENTION_BW),
    )
    def slow_attention_backend(self, backend, frac, parent_cap_ms):
        return Finding(
            evidence=[ev("kernel_classes[attention].backend", backend), ev("kernel_classes[attention].achieved_bw_fraction", frac)],
            removable_ms=parent_cap_ms,
        )
