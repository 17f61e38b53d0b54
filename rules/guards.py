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
    Expectation,
    Finding,
    KernelSum,
    Metrics,
    P,
    QuotedBound,
    Reference,
    RuleSet,
    Speculation,
    ev,
    load_specs,
    rule,
)

from diagnoser.rules.rates import engine_side, stream_rates

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


# A client receives a stream's tokens no faster than the engine makes them; rates of one stream read at the two
# clocks agree within the client's jitter (CLIENT_SLACK in output_path). An engine-side rate under half the client's
# is beyond any jitter, and beyond what one setting of the same engine usually moves (tens of per cent).
INNER_SLOWER = 2.0


def stream_ms(side, rate) -> float | None:
    """One stream's time per token on a side: its stated per-token time, else one over its per-stream rate."""
    stated = side.get("per_token_ms")
    return stated if stated is not None else (1e3 / rate if rate else None)


def inner_slower(m, e) -> float | None:
    """How many times the engine's own per-token time exceeds the client's for the same engine at the same
    concurrency, or None where the sides are not those two clocks or their concurrencies differ."""
    if e.get("kind") != "other_config" or m.get("concurrency") != e.get("concurrency"):
        return None
    mine, theirs = stream_rates(m, e)
    observed, expected = stream_ms(m, mine), stream_ms(e, theirs)
    if None in (observed, expected):
        return None
    if engine_side(m.get("boundary")) and e.get("boundary") == "client_receipt":
        return observed / expected
    if m.get("boundary") == "client_receipt" and engine_side(e.get("boundary")):
        return expected / observed
    return None


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
        SPECS["boundary-mismatch"],
        AS.m << Metrics(concurrency=MATCH.concurrency),
        AS.e << Expectation(boundary=P(lambda b: b != "unknown")),
        TEST(lambda m, e: (inner_slower(m, e) or 0) >= INNER_SLOWER),
    )
    def engine_figure_below_the_clients(self, m, e):
        """The engine's own figure for a stream is slower than a client received from the same engine at the same
        concurrency: tokens cannot reach a client faster than they are made, so the engine's figure is not that
        stream's time per token (a window's average over idle time, or another count)."""
        times = inner_slower(m, e)
        return Finding(
            evidence=[ev("metrics.boundary", m["boundary"]), ev("expected.boundary", e["boundary"]),
                      ev("metrics.concurrency", m["concurrency"]), ev("engine_over_client_time", times, "x")],
            detail=f"The engine-side figure is {times:.3g}x the client's time per token for the same engine and "
            "concurrency: a client cannot receive faster than the engine makes tokens.",
        )

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
