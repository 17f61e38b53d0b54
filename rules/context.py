"""Slowdown at long context: KV, indexer or attention work that grows with the context.

Some growth is expected (the bound counts KV reads); a rule fires when the step grows by a
large factor for the same output work, and asks whether the bound grows as much.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    TEST,
    Boundaries,
    ContextSweep,
    Finding,
    HostCostFact,
    KernelClass,
    Metrics,
    NOT,
    OR,
    P,
    W,
    Reference,
    RuleSet,
    Speculation,
    Traffic,
    ev,
    load_specs,
    rule,
)

from diagnoser.rules.comparison import UNITS, ablation, ablation_finding, beyond_the_size
from diagnoser.rules.launch import cycle_finding, one_stream_speculation_ab
from diagnoser.rules.speculation import LONG_CONTEXT, speculating_and_not

SPECS = load_specs(__file__)

# A 30 % longer step across the sweep is more than noise and worth attributing.
GROWTH = 1.3
# With the model pinned, the bound says how much a longer KV cache should cost: a step that grows
# 10 % beyond that (and at least 10 % in all) spends the extra on something else.
BEYOND_BOUND = 1.1
MIN_GROWTH = 1.1
# Attention below half of peak bandwidth at long context is a backend question.
ATTENTION_BW = 0.5
# Attention's share of the step's time against the KV read's share of its bytes, and the least share worth it.
TIME_OVER_BYTES = 2.5
MIN_ATTENTION_SHARE = 0.15
# A step that grows by twice its own length for every 1k tokens generated is redoing the sequence: history-wide host
# work (a penalty scan, a re-detokenization) costs micro- to milliseconds per 1k tokens, and a KV read per token is a
# small fraction of the weights' bytes, but a forward pass over the whole sequence adds a prompt token's work per token.
SEQUENCE_REDONE = 2.0


def grows_too_much(s, growth: float) -> bool:
    """More than the bound's own growth allows, when the model is pinned; else a large factor."""
    expected = s.get("bound_growth")
    if expected is None:
        return growth >= GROWTH
    return growth >= MIN_GROWTH and growth >= BEYOND_BOUND * expected


def within_the_size(d, key: str):
    """The A/B's delta, less what work sized by the larger setting cannot add: such work grows at most with the size,
    so a slowdown beyond the sizes' ratio is not all its own (a larger allocation spilling off the device is)."""
    finding = ablation_finding(d, key=key)
    beyond = beyond_the_size(d)
    if finding.removable_ms is None or not beyond:
        return finding
    finding.removable_ms -= beyond
    finding.detail += (f" Work sized by {d['setting']} grows at most {d['slower']}/{d['faster']}-fold: {beyond:.3g} "
                       f"{UNITS.get(d['figure'], '')} of the delta is beyond it.")
    return finding


def sweep_evidence(s) -> list:
    return [
        ev("context_sweep.context_lo", s["context_lo"]),
        ev("context_sweep.step_lo_ms", s["step_lo_ms"], "ms"),
        ev("context_sweep.context_hi", s["context_hi"]),
        ev("context_sweep.step_hi_ms", s["step_hi_ms"], "ms"),
    ]


class ContextRules(RuleSet):
    @rule(SPECS["slow-attention-backend"], *ablation("attention_backend"))
    def attention_backend_measured(self, d, parent_cap_ms):
        return ablation_finding(d)

    @rule(SPECS["max-context-work"], *ablation("max_context"))
    def max_context_measured(self, d, parent_cap_ms):
        """Only the configured maximum changed, yet the step moved: work follows the maximum, not the live context."""
        return within_the_size(d, key="configured")

    @rule(SPECS["max-context-work"], *ablation("kv_cache_capacity"))
    def kv_capacity_measured(self, d, parent_cap_ms):
        """Only the cache's allocated size changed, yet the step moved: work follows the allocation."""
        return within_the_size(d, key="allocated")

    @rule(
        SPECS["long-context-slowdown"],
        Metrics(per_token_grows_with=P(lambda g: "context" in g)),
        NOT(ContextSweep(growth=W())),
    )
    def reported_context_growth(self):
        """The per-token time was seen to grow as the context fills, with no sweep to size it."""
        return Finding(evidence=[ev("metrics.per_token_grows_with", "context")], detail="No sweep gives the growth its size yet.")

    @rule(
        SPECS["long-context-slowdown"],
        Boundaries(itl_growth_ms_per_1k_output=MATCH.growth),
        Reference(step_ms=MATCH.step),
        NOT(ContextSweep(growth=W())),
        TEST(lambda growth, step: growth >= SEQUENCE_REDONE * step),
    )
    def sequence_redone_each_step(self, growth, step):
        """Each step costs the step's own time again, twice over, for every 1k tokens it has generated: only work over
        the whole sequence grows that fast (no KV cache kept, or a cache rebuilt or copied whole every step), so the
        time goes to the context's work, not to host post-processing over the history."""
        return Finding(
            evidence=[ev("boundaries.itl_growth_ms_per_1k_output", growth, "ms"), ev("reference.step_ms", step, "ms")],
            removable_ms=growth,
            step_ms=step + growth,
            detail=f"The step grows {growth:.4g} ms per 1k tokens generated, {growth / step:.3g}x the {step:.4g} ms step itself: "
            "the gain shown is for a step 1k tokens into the output.",
        )

    @rule(
        SPECS["long-context-slowdown"],
        *one_stream_speculation_ab(),
        AS.m << Metrics(),
        OR(Speculation(context=P(lambda n: n >= LONG_CONTEXT)), Metrics(input_tokens=P(lambda n: n >= LONG_CONTEXT))),
    )
    def verify_rereads_the_context(self, s, m, before, base, other):
        """Speculation on and off for one stream at a long context, and a cycle that costs more than verifying k+1
        tokens and drafting k would where the weights make the step: at this context the KV read is much of a step, and
        a verify whose attention reads it for each of its query tokens pays it k+1 times. Acceptance, which the cycle's
        yield already counts, does not explain it; the context's work does."""
        on, off = speculating_and_not(before, base, other)
        context = s.get("context") or m["input_tokens"]
        return cycle_finding(s, on, off, ev("runs.speculative_off_time", off, "ms"),
                             f"At a context of {context:g} tokens the verify's attention can read the KV once per query token. ")

    @rule(SPECS["max-context-work"], Metrics(per_token_grows_with=P(lambda g: "max_context" in g)))
    def reported_max_context_growth(self, parent_cap_ms):
        return Finding(evidence=[ev("metrics.per_token_grows_with", "max_context")], removable_ms=parent_cap_ms, key="reported")

    @rule(SPECS["long-context-slowdown"], AS.s << ContextSweep(growth=MATCH.growth), TEST(lambda s, growth: grows_too_much(s, growth)))
    def long_context_slowdown(self, s, growth):
        expected = s.get("bound_growth")
        if expected is not None:
            return Finding(
                evidence=[*sweep_evidence(s), ev("context_sweep.bound_growth", expected)],
                removable_ms=s["step_hi_ms"] - s["step_lo_ms"] * expected,
                step_ms=s["step_hi_ms"],
                detail=f"The step grows {growth:.3g}x from context {s['context_lo']} to {s['context_hi']}, the bytes the bound "
                f"counts only {expected:.3g}x; the gain is the growth beyond the bytes, at the longest context.",
            )
        return Finding(
            evidence=sweep_evidence(s),
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

    @rule(
        SPECS["slow-attention-backend"],
        KernelClass(kernel_class="attention", share_of_step=MATCH.share),
        Traffic(kv_read_share=MATCH.kv),
        NOT(KernelClass(kernel_class="attention", achieved_bw_fraction=W())),
        TEST(lambda share, kv: share >= MIN_ATTENTION_SHARE and share >= TIME_OVER_BYTES * kv),
    )
    def attention_time_over_its_bytes(self, share, kv):
        """No peak bandwidth to hold attention against, but the step's own GEMMs: a memory-bound step's kernels
        read at about one bandwidth, so attention's share of the time should be near the KV read's share of the
        bytes. The excess share is what a backend reading KV as fast as the GEMMs read weights would save."""
        step = self.reference_step_ms
        evidence = [ev("kernel_classes[attention].share_of_step", share), ev("traffic.kv_read_share", kv)]
        detail = f"Attention takes {share:.0%} of the step but the KV read is {kv:.0%} of the bytes: it reads {share / kv:.3g}x slower per byte than the rest."
        if step is None:
            return Finding(evidence=evidence, detail=detail + f" At most {1 / (1 - share + kv):.3g}x; a step time makes it a gain.")
        return Finding(evidence=evidence + [ev("reference.step_ms", step, "ms")], removable_ms=(share - kv) * step, detail=detail)

    @rule(SPECS["attention-split-kv-off"], AS.k << KernelClass(kernel_class="attention", split_kv=False))
    def attention_split_kv_off(self, k, parent_cap_ms):
        """Without the split, CTAs are sequences x KV heads; when that already fills the SMs the split buys nothing."""
        evidence = [ev("kernel_classes[attention].split_kv", False)]
        evidence += [ev(f"kernel_classes[attention].{n}", k[n]) for n in ("grid_ctas", "sm_count", "backend") if n in k]
        if "grid_ctas" in k and "sm_count" in k and k["grid_ctas"] >= k["sm_count"]:
            return None
        return Finding(
            evidence=evidence,
            removable_ms=parent_cap_ms,
            detail="Each CTA walks a whole sequence's KV: at small batch and long context few CTAs run and most SMs idle.",
        )

    @rule(SPECS["max-context-work"], AS.k << KernelClass(scales_with_max_context=True))
    def max_context_kernel(self, k, parent_cap_ms):
        cls = k["kernel_class"]
        return Finding(
            evidence=[ev(f"kernel_classes[{cls}].scales_with_max_context", True)],
            removable_ms=parent_cap_ms,
            key=cls,
            detail=f"{cls} work follows the configured maximum context, not the live one.",
        )

    @rule(SPECS["max-context-work"], AS.c << HostCostFact(grows_with=P(lambda g: "max_context" in g)))
    def max_context_host_cost(self, c, parent_cap_ms):
        """A measured host cost is its own bound; an estimate only names the cause."""
        name = c["name"]
        evidence = [ev(f"host_costs[{name}].grows_with", ", ".join(c["grows_with"]))]
        measured = c.get("measured", True) and "ms_per_step" in c
        if measured:
            evidence.append(ev(f"host_costs[{name}].ms_per_step", c["ms_per_step"], "ms"))
        return Finding(
            evidence=evidence,
            removable_ms=c["ms_per_step"] if measured else parent_cap_ms,
            key=name,
            detail=f"Host work {name} grows with the configured maximum context, not the live one.",
        )
