"""Common reasoning mistakes, caught in the inputs before anyone tunes against them.

Each guard fires on how a number was built (its basis, its boundary, what was added to
what), not on how large it is: a wrong denominator produces a gap no kernel work can close.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    Bound,
    TEST,
    BoundaryPair,
    Budget,
    Claim,
    ClaimedStep,
    Finding,
    KernelSum,
    Kind,
    QuotedBound,
    Reference,
    RuleSet,
    RuleSpec,
    Speculation,
    ev,
    note,
    rule,
)

# Parts or totals more than 5-10 % above the measured step cannot all be on one serial path.
OVERCOUNT = 1.05
CLAIM_OVERCOUNT = 1.1
# Two byte counts within 5 % are the same figure.
SAME_FIGURE = 0.05


def _guard(*texts: str) -> RuleSpec:
    return note(Kind.guard, *texts)


ACTIVE_PARAMS = _guard(
    "active-params-as-traffic",
    "Active-parameter bytes used as the HBM traffic per step",
    "Active parameters are the weights one token uses; the bytes a rank reads per step also depend on the batch's expert union, KV, other state, reuse and precision.",
    "recompute the per-rank bytes with `diagnoser bound` (expert union at the served batch, KV, state) or read DRAM bytes with ncu",
    "the per-rank byte count differs materially from active params x bytes/param",
    "the counts agree at this batch (single sequence, no KV to speak of)",
)
SUMMED_BANDWIDTH = _guard(
    "summed-bandwidth",
    "Bandwidth summed over ranks",
    "Adding every rank's bandwidth assumes perfectly balanced, concurrent work; a synchronized step runs at the pace of the busiest rank.",
    "per-rank bytes over one rank's bandwidth, maximum over ranks",
    "the busiest rank's time is longer than total bytes over summed bandwidth",
    "ranks move equal bytes (the two figures agree)",
)
UNCOALESCED = _guard(
    "expert-tensors-uncoalesced",
    "Separate expert tensors blamed as uncoalesced reads",
    "Experts living in separate memory regions does not make the reads inside each matrix uncoalesced; sparse routing is not random access.",
    "ncu memory workload analysis of the MoE kernels: sectors per request and L2/DRAM efficiency",
    "sectors per request far above the ideal on the expert weight loads",
    "near-ideal sectors per request (look at grid size and rows per expert instead)",
)
OVERLAP_SUMMED = _guard(
    "overlap-summed",
    "Overlapped durations added into a serial step budget",
    "Durations that overlap (on other streams or other ranks) were summed as if serial, so the budget exceeds the step that was measured.",
    "rebuild the budget from the critical rank's timeline, counting only non-overlapping parts",
    "the rebuilt parts add up to the measured step",
    "the parts really are serial and the step measurement is wrong",
)
KERNEL_SUM = _guard(
    "kernel-sum-as-elapsed",
    "Kernel totals across ranks read as elapsed time",
    "Kernel time summed over ranks counts concurrent work once per rank; it is a resource total, not wall time.",
    "the critical rank's step wall time from its own timeline",
    "the sum divided by the number of ranks lands near the measured step",
    "one rank alone runs as long as the sum (impossible for concurrent ranks)",
)
SPEC_COST = _guard(
    "speculation-without-cost",
    "Speculation gain quoted without draft and verify cost",
    "Fewer target invocations is not a speed-up by itself: each cycle pays drafting, verification and other work.",
    "draft, verify and other time per cycle and accepted tokens per cycle, measured together (then `diagnoser whatif speculate`)",
    "the computed speed-up with all costs is below the quoted one",
    "the computed speed-up matches the quoted one",
)
BOUNDARY_MISMATCH = _guard(
    "boundary-mismatch",
    "Observation and bound at different timing boundaries",
    "The bound describes device steps; a time read at the server or client adds scheduling, sampling, detokenization and transport no kernel change can remove.",
    "the observation at the device-step boundary (trace) or the bound extended to the same boundary",
    "the gap shrinks when both sit at the same boundary",
    "the gap stays the same at the device boundary",
)


class GuardRules(RuleSet):
    @rule(ACTIVE_PARAMS, QuotedBound(bytes_basis="active_parameters"))
    def active_params_as_traffic(self):
        return Finding(evidence=[ev("bound_inputs.bytes_basis", "active_parameters")])

    @rule(
        ACTIVE_PARAMS,
        QuotedBound(bytes_per_step=MATCH.quoted),
        Bound(active_parameter_bytes=MATCH.naive, critical_rank_bytes=MATCH.real),
        TEST(lambda quoted, naive, real: abs(quoted - naive) <= SAME_FIGURE * naive and abs(real - naive) > SAME_FIGURE * naive),
    )
    def quoted_bytes_are_active_params(self, quoted, naive, real):
        return Finding(
            evidence=[
                ev("bound_inputs.bytes_per_step", quoted, "B"),
                ev("bound.active_parameter_bytes", naive, "B"),
                ev("bound.critical_rank_bytes", real, "B"),
            ],
            detail=f"The quoted {quoted / 1e9:.3g} GB is the active-parameter figure; the busiest rank moves {real / 1e9:.3g} GB.",
        )

    @rule(SUMMED_BANDWIDTH, QuotedBound(bandwidth_is_summed_over_ranks=True))
    def summed_bandwidth(self):
        return Finding(evidence=[ev("bound_inputs.bandwidth_is_summed_over_ranks", True)])

    @rule(UNCOALESCED, Claim(name="uncoalesced_expert_reads"))
    def expert_tensors_uncoalesced(self):
        return Finding(evidence=[ev("claims", "uncoalesced_expert_reads")])

    @rule(OVERLAP_SUMMED, Budget(summed_across_ranks=True))
    def overlap_summed_flag(self):
        return Finding(evidence=[ev("budget.summed_across_ranks", True)])

    @rule(
        OVERLAP_SUMMED,
        Budget(parts_ms=MATCH.parts, step_ms=MATCH.step),
        TEST(lambda parts, step: parts > OVERCOUNT * step),
    )
    def overlap_summed_parts(self, parts, step):
        return Finding(evidence=[ev("budget.parts_ms", parts, "ms"), ev("budget.step_ms", step, "ms")])

    @rule(
        OVERLAP_SUMMED,
        ClaimedStep(ms=MATCH.claimed),
        Reference(step_ms=MATCH.step),
        TEST(lambda claimed, step: claimed > CLAIM_OVERCOUNT * step),
    )
    def overlap_summed_claim(self, claimed, step):
        return Finding(evidence=[ev("claimed_step_ms", claimed, "ms"), ev("reference.step_ms", step, "ms")])

    @rule(
        KERNEL_SUM,
        KernelSum(ms=MATCH.total),
        Reference(step_ms=MATCH.step),
        TEST(lambda total, step: total > OVERCOUNT * step),
    )
    def kernel_sum_as_elapsed(self, total, step):
        return Finding(
            evidence=[ev("kernel_sum_across_ranks_ms", total, "ms"), ev("reference.step_ms", step, "ms")],
            detail=f"{total:.3g} ms of kernels in a {step:.3g} ms step is only possible if ranks run concurrently.",
        )

    @rule(
        SPEC_COST,
        AS.s << Speculation(claimed_speedup=MATCH.claimed),
        TEST(lambda s: "draft_ms" not in s or "verify_ms" not in s),
    )
    def speculation_costs_missing(self, claimed):
        return Finding(evidence=[ev("speculation.claimed_speedup", claimed)], detail="The case has no draft or verify time.")

    @rule(
        SPEC_COST,
        Speculation(claimed_speedup=MATCH.claimed, speedup=MATCH.computed),
        TEST(lambda claimed, computed: claimed > CLAIM_OVERCOUNT * computed),
    )
    def speculation_claim_too_high(self, claimed, computed):
        return Finding(
            evidence=[ev("speculation.claimed_speedup", claimed), ev("computed_speedup", computed)],
            detail=f"With the measured costs the speed-up is {computed:.2f}x, not {claimed:.2f}x.",
        )

    @rule(BOUNDARY_MISMATCH, BoundaryPair(observed=MATCH.observed, bound=MATCH.bound), TEST(lambda observed, bound: observed != bound))
    def boundary_mismatch(self, observed, bound):
        return Finding(evidence=[ev("observed.boundary", observed), ev("bound.boundary", bound)])
