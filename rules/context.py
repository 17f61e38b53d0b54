"""Slowdown at long context: KV, indexer or attention work that grows with the context.

Some growth is expected (the bound counts KV reads); a rule fires when the step grows by a
large factor for the same output work, and asks whether the bound grows as much.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    TEST,
    Check,
    ContextSweep,
    Finding,
    KernelClass,
    RemedySpec,
    RuleSet,
    RuleSpec,
    ev,
    rule,
    undo,
)

# A 30 % longer step across the sweep is more than noise and worth attributing.
GROWTH = 1.3
# Attention below half of peak bandwidth at long context is a backend question.
ATTENTION_BW = 0.5

LONG_CONTEXT = RuleSpec(
    id="long-context-slowdown",
    title="Long-context slowdown",
    requires=("context_sweep",),
    explanation="For the same output work, the step grows with context: KV/indexer traffic or attention compute.",
    check=Check(
        measure="the same output workload at controlled context lengths, next to the bound's KV bytes at each length",
        confirms="the step grows faster than the bound's KV traffic, or attention kernels dominate the growth",
        refutes="the step grows exactly as the bound's KV bytes predict (it is the expected memory cost)",
    ),
    remedies=(RemedySpec(action="use a KV-efficient path: paged/flash decode attention, fp8 KV cache, or a layout that splits KV over more ranks", cost="configuration or layout change", risk="fp8 KV may change quality", share=0.5),),
    undo=(undo("quality", "long-context evaluation scores drop (fp8 KV)"), undo("per_user_latency", "the long-context step does not shorten")),
)

ATTENTION_BACKEND = RuleSpec(
    id="slow-attention-backend",
    title="Attention backend is slow at long context",
    parent="long-context-slowdown",
    requires=("kernel_classes",),
    explanation="Attention kernels run well under peak bandwidth while the context grows, so the backend, not the bytes, sets the time.",
    check=Check(
        measure="attention kernel bandwidth (ncu) with the alternative backends at the long context",
        confirms="another backend moves the same KV bytes faster",
        refutes="all backends land at the same time",
    ),
    remedies=(RemedySpec(action="select a decode-optimized attention backend for this GPU and KV dtype", cost="configuration", risk="supported features (sliding window, MLA) differ"),),
    undo=LONG_CONTEXT.undo,
)


class ContextRules(RuleSet):
    @rule(LONG_CONTEXT, AS.s << ContextSweep(growth=MATCH.growth), TEST(lambda growth: growth >= GROWTH))
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
        ATTENTION_BACKEND,
        KernelClass(kernel_class="attention", backend=MATCH.backend, achieved_bw_fraction=MATCH.frac),
        TEST(lambda frac: frac < ATTENTION_BW),
    )
    def slow_attention_backend(self, backend, frac, parent_cap_ms):
        return Finding(
            evidence=[ev("kernel_classes[attention].backend", backend), ev("kernel_classes[attention].achieved_bw_fraction", frac)],
            removable_ms=parent_cap_ms,
        )
