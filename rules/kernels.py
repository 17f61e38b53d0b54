"""Device work that takes longer than its bytes need: small expert GEMMs, untuned or slow kernel paths.

A kernel class can at most shrink to the time its bytes take at full bandwidth, so each
rule claims ``time x (1 - achieved bandwidth fraction)``, or the whole class time when the
fraction was not measured (an upper bound, stated as such).
"""

from diagnoser.engine import (
    AS,
    MATCH,
    TEST,
    Budget,
    Finding,
    KernelClass,
    P,
    RuleSet,
    Server,
    ev,
    load_specs,
    rule,
)

SPECS = load_specs(__file__)

# Below this share of device time a kernel class cannot move the step enough to lead.
MIN_SHARE = 0.15
# Under ~16 rows per expert a GEMM is a skinny matrix-vector product: weight reads dominate
# and too few CTAs are in flight to pull full bandwidth.
SMALL_ROWS_PER_EXPERT = 16
# Under 60 % of peak bandwidth a weight-streaming kernel is not bandwidth-limited.
LOW_BW_FRACTION = 0.6
# A served MoE kernel this many times slower than a plain GEMM at the same rows per expert is
# the kernel's doing; inside that margin, packing and routing overheads explain the difference.
BELOW_REFERENCE = 1.25


def headroom_ms(device_ms: float, share: float, bw_fraction: float | None, reference: float = 1.0) -> float:
    """Time a kernel class could lose if it reached ``reference`` of peak bandwidth: full bandwidth,
    or what a plain GEMM reaches at the same shape (all of the class when unmeasured)."""
    class_ms = device_ms * share
    if bw_fraction is None:
        return class_ms
    return class_ms * max(0.0, 1.0 - bw_fraction / reference)


def small_expert_work(k) -> bool:
    underfilled = "grid_ctas" in k and "sm_count" in k and k["grid_ctas"] < k["sm_count"]
    skinny = "tokens_per_expert" in k and k["tokens_per_expert"] < SMALL_ROWS_PER_EXPERT
    slow = k.get("achieved_bw_fraction", 0.0) < LOW_BW_FRACTION
    return (underfilled or skinny) and slow


def split_expert_loss(class_ms: float, achieved: float, reference: float) -> tuple[float, float]:
    """(kernel part, shape part) of the time the expert GEMMs lose against full bandwidth.

    Matching a plain GEMM at the same rows would cut the class to ``achieved / reference`` of
    its time; what is left is lost to the shape itself, which only more rows per expert (or
    wider expert shards) recover. The two parts add up to ``class_ms x (1 - achieved)``, the
    parent's claim.
    """
    kernel = headroom_ms(class_ms, 1.0, achieved, reference)
    return kernel, headroom_ms(class_ms, 1.0, achieved) - kernel


def _kernel_evidence(k) -> list:
    names = (
        "share_of_step", "count_per_step", "grid_ctas", "sm_count", "tokens_per_expert", "achieved_bw_fraction",
        "reference_bw_fraction", "reference_dtype", "backend",
    )
    estimated = set(k.get("estimated_from_bound", ()))
    return [
        ev(f"kernel_classes[{k['kernel_class']}].{n}" + (" (estimated from the bound)" if n in estimated else ""), k[n])
        for n in names
        if n in k
    ]



# The MoE class with the plain-GEMM yardstick at its rows per expert, and the device time it shares.
MOE_AND_REFERENCE = (
    AS.k << KernelClass(kernel_class="moe", share_of_step=MATCH.share, achieved_bw_fraction=MATCH.a, reference_bw_fraction=MATCH.r),
    Budget(device_ms=MATCH.device),
)


class KernelRules(RuleSet):
    @rule(
        SPECS["small-expert-kernels"],
        AS.k << KernelClass(kernel_class="moe", share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda k, share: share >= MIN_SHARE and small_expert_work(k)),
    )
    def small_expert_kernels(self, k, share, device):
        return Finding(
            evidence=_kernel_evidence(k) + [ev("budget.device_ms", device, "ms")],
            removable_ms=headroom_ms(device, share, k.get("achieved_bw_fraction")),
        )

    @rule(SPECS["expert-kernel-below-reference"], *MOE_AND_REFERENCE, TEST(lambda a, r: a * BELOW_REFERENCE < r))
    def expert_kernel_below_reference(self, k, share, a, r, device):
        kernel, _ = split_expert_loss(device * share, a, r)
        detail = f"With {k['tokens_per_expert']:.3g} rows per expert a plain GEMM reaches {r:.0%} of peak bandwidth, the served kernel {a:.0%}."
        return Finding(evidence=_kernel_evidence(k), removable_ms=kernel, detail=detail)

    @rule(SPECS["expert-shape-limited"], *MOE_AND_REFERENCE, TEST(lambda r: r < LOW_BW_FRACTION))
    def expert_shape_limited(self, k, share, a, r, device):
        _, shape = split_expert_loss(device * share, a, r)
        detail = f"With {k['tokens_per_expert']:.3g} rows per expert a plain GEMM reaches only {r:.0%} of peak bandwidth."
        return Finding(evidence=_kernel_evidence(k), removable_ms=shape, detail=detail)

    @rule(
        SPECS["moe-untuned-config"],
        AS.k << KernelClass(kernel_class="moe", tuned_config=False, share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda share: share >= MIN_SHARE),
    )
    def moe_untuned_config(self, k, share, device):
        """With a GEMM sweep, tuning is bounded by matching the plain GEMM at the same rows, not
        by full bandwidth: the rest of the loss belongs to the shape."""
        removable = headroom_ms(device, share, k.get("achieved_bw_fraction"), k.get("reference_bw_fraction", 1.0))
        return Finding(evidence=_kernel_evidence(k) + [ev("kernel_classes[moe].tuned_config", False)], removable_ms=removable)

    @rule(
        SPECS["slow-kernel-path"],
        AS.k << KernelClass(backend=MATCH.backend, share_of_step=MATCH.share, achieved_bw_fraction=MATCH.frac),
        Budget(device_ms=MATCH.device),
        TEST(lambda share, frac: share >= MIN_SHARE and frac < LOW_BW_FRACTION / 1.5),
    )
    def slow_kernel_path(self, k, backend, share, frac, device):
        return Finding(
            evidence=_kernel_evidence(k),
            removable_ms=headroom_ms(device, share, frac),
            key=k["kernel_class"],
            detail=f"{k['kernel_class']} on {backend} reaches {frac:.0%} of peak bandwidth.",
        )

    @rule(
        SPECS["sort-sampling"],
        Server(sampling=P(lambda s: "sort" in s.lower())),
        AS.k << KernelClass(kernel_class="sampling", share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda share: share >= 0.03),
    )
    def sort_sampling(self, k, share, device):
        return Finding(evidence=_kernel_evidence(k) + [ev("server.sampling", "sort")], removable_ms=device * share)
