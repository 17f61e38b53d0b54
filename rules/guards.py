"""Common reasoning mistakes, caught in the inputs before anyone tunes against them.

Each guard fires on how a number was built (its basis, its boundary, what was added to
what), not on how large it is: a wrong denominator produces a gap no kernel work can close.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    TEST,
    Bound,
    BoundaryPair,
    Budget,
    Claim,
    ClaimedStep,
    Finding,
    KernelSum,
    QuotedBound,
    Reference,
    RuleSet,
    Speculation,
    ev,
    load_specs,
    rule,
)

SPECS = load_specs(__file__)

# Parts or totals more than 5-10 % above the measured step cannot all be on one serial path.
OVERCOUNT = 1.05
# Two figures within 10 % of each other are taken to be the same number quoted twice.
SAME_FIGURE = 0.1


def same_figure(a: float, b: float) -> bool:
    return abs(a - b) <= SAME_FIGURE * max(a, b)


# A claimed figure more than 10 % above the one it is checked against is beyond rounding: it was built wrongly.
CLAIM_OVERCOUNT = 1.1
# A traced Python call costs the host about a microsecond; a thousand or more per step is
# milliseconds of host time that the un-profiled server does not spend.
TRACED_CALLS = 1000
# Host-side parts (launch + host) worth questioning: 8 % of the step, as for launch gaps.
HOST_SIDE_SHARE = 0.08
# No step markers, a window of a second or more and the GPU busy under half of it: the capture
# holds startup, compilation or idle time, not decode steps (decode steps are milliseconds).
WHOLE_TRACE_MS = 1000.0
BUSY_SHARE = 0.5
# Two byte counts within 5 % are the same figure (byte counts are exact; timings are not).
SAME_BYTES = 0.05


class GuardRules(RuleSet):
    @rule(SPECS["active-params-as-traffic"], QuotedBound(bytes_basis="active_parameters"))
    def active_params_as_traffic(self):
        return Finding(evidence=[ev("bound_inputs.bytes_basis", "active_parameters")])

    @rule(
        SPECS["active-params-as-traffic"],
        QuotedBound(bytes_per_step=MATCH.quoted),
        Bound(active_parameter_bytes=MATCH.naive, critical_rank_bytes=MATCH.real),
        TEST(lambda quoted, naive, real: abs(quoted - naive) <= SAME_BYTES * naive and abs(real - naive) > SAME_BYTES * naive),
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

    @rule(SPECS["summed-bandwidth"], QuotedBound(bandwidth_is_summed_over_ranks=True))
    def summed_bandwidth(self):
        return Finding(evidence=[ev("bound_inputs.bandwidth_is_summed_over_ranks", True)])

    @rule(SPECS["expert-tensors-uncoalesced"], Claim(name="uncoalesced_expert_reads"))
    def expert_tensors_uncoalesced(self):
        return Finding(evidence=[ev("claims", "uncoalesced_expert_reads")])

    @rule(SPECS["overlap-summed"], Budget(summed_across_ranks=True))
    def overlap_summed_flag(self):
        return Finding(evidence=[ev("budget.summed_across_ranks", True)])

    @rule(
        SPECS["overlap-summed"],
        Budget(parts_ms=MATCH.parts, step_ms=MATCH.step),
        TEST(lambda parts, step: parts > OVERCOUNT * step),
    )
    def overlap_summed_parts(self, parts, step):
        return Finding(evidence=[ev("budget.parts_ms", parts, "ms"), ev("budget.step_ms", step, "ms")])

    @rule(
        SPECS["overlap-summed"],
        ClaimedStep(ms=MATCH.claimed),
        Reference(step_ms=MATCH.step),
        TEST(lambda claimed, step: claimed > CLAIM_OVERCOUNT * step),
    )
    def overlap_summed_claim(self, claimed, step):
        return Finding(evidence=[ev("claimed_step_ms", claimed, "ms"), ev("reference.step_ms", step, "ms")])

    # A kernel total over ranks is a legitimate, labelled figure (``diagnoser analyze`` reports
    # it); the mistake is to use it as a time: as a claimed step, or as the budget's device part.
    @rule(
        SPECS["kernel-sum-as-elapsed"],
        KernelSum(ms=MATCH.total),
        ClaimedStep(ms=MATCH.claimed),
        Reference(step_ms=MATCH.step),
        TEST(lambda total, claimed, step: same_figure(claimed, total) and total > OVERCOUNT * step),
    )
    def kernel_sum_claimed_as_step(self, total, claimed, step):
        return Finding(
            evidence=[ev("kernel_sum_across_ranks_ms", total, "ms"), ev("claimed_step_ms", claimed, "ms"),
                      ev("reference.step_ms", step, "ms")],
            detail=f"{total:.3g} ms of kernels in a {step:.3g} ms step is only possible if ranks run concurrently.",
        )

    @rule(
        SPECS["kernel-sum-as-elapsed"],
        KernelSum(ms=MATCH.total),
        Budget(device_ms=MATCH.device, step_ms=MATCH.step),
        TEST(lambda total, device, step: same_figure(device, total) and total > OVERCOUNT * step),
    )
    def kernel_sum_as_device_part(self, total, device, step):
        return Finding(
            evidence=[ev("kernel_sum_across_ranks_ms", total, "ms"), ev("budget.device_ms", device, "ms"),
                      ev("budget.step_ms", step, "ms")],
            detail="The budget's device part is the kernel total over all ranks, not one rank's critical path.",
        )

    @rule(
        SPECS["speculation-without-cost"],
        AS.s << Speculation(claimed_speedup=MATCH.claimed),
        TEST(lambda s: "draft_ms" not in s or "verify_ms" not in s),
    )
    def speculation_costs_missing(self, claimed):
        return Finding(evidence=[ev("speculation.claimed_speedup", claimed)], detail="The case has no draft or verify time.")

    @rule(
        SPECS["speculation-without-cost"],
        Speculation(claimed_speedup=MATCH.claimed, speedup=MATCH.computed),
        TEST(lambda claimed, computed: claimed > CLAIM_OVERCOUNT * computed),
    )
    def speculation_claim_too_high(self, claimed, computed):
        return Finding(
            evidence=[ev("speculation.claimed_speedup", claimed), ev("computed_speedup", computed)],
            detail=f"With the measured costs the speed-up is {computed:.2f}x, not {claimed:.2f}x.",
        )

    @rule(SPECS["boundary-mismatch"], BoundaryPair(observed=MATCH.observed, bound=MATCH.bound), TEST(lambda observed, bound: observed != bound))
    def boundary_mismatch(self, observed, bound):
        return Finding(evidence=[ev("observed.boundary", observed), ev("bound.boundary", bound)])

    @rule(
        SPECS["python-tracer-inflates-host"],
        Budget(python_calls=MATCH.calls, launch_ms=MATCH.launch, host_ms=MATCH.host, step_ms=MATCH.step),
        TEST(lambda calls, launch, host, step: calls >= TRACED_CALLS and launch + host >= HOST_SIDE_SHARE * step),
    )
    def python_tracer_inflates_host(self, calls, launch, host, step):
        return Finding(
            evidence=[
                ev("budget.python_calls", calls),
                ev("budget.launch_ms", launch, "ms"),
                ev("budget.host_ms", host, "ms"),
                ev("budget.step_ms", step, "ms"),
            ],
            detail=f"{calls} traced Python calls in a {step:.3g} ms step: the launch and host parts include the tracer's cost.",
        )

    @rule(
        SPECS["capture-window-not-a-step"],
        Budget(segmentation="whole_trace", step_ms=MATCH.step, device_ms=MATCH.device, exposed_comm_ms=MATCH.comm),
        TEST(lambda step, device, comm: step >= WHOLE_TRACE_MS and device + comm < BUSY_SHARE * step),
    )
    def capture_window_not_a_step(self, step, device, comm):
        return Finding(
            evidence=[ev("budget.segmentation", "whole_trace"), ev("budget.step_ms", step, "ms"), ev("gpu_busy_ms", device + comm, "ms")],
            detail=f"The GPU is busy {device + comm:.4g} of {step:.4g} ms of the capture.",
        )
