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
    Check,
    Finding,
    KernelClass,
    P,
    RemedySpec,
    RuleSet,
    RuleSpec,
    Server,
    ev,
    rule,
    undo,
)

# Below this share of device time a kernel class cannot move the step enough to lead.
MIN_SHARE = 0.15
# Under ~16 rows per expert a GEMM is a skinny matrix-vector product: weight reads dominate
# and too few CTAs are in flight to pull full bandwidth.
SMALL_ROWS_PER_EXPERT = 16
# Under 60 % of peak bandwidth a weight-streaming kernel is not bandwidth-limited.
LOW_BW_FRACTION = 0.6


def headroom_ms(device_ms: float, share: float, bw_fraction: float | None) -> float:
    """Time a kernel class could lose if it ran at full bandwidth (all of it when unmeasured)."""
    class_ms = device_ms * share
    if bw_fraction is None:
        return class_ms
    return class_ms * max(0.0, 1.0 - bw_fraction)


def small_expert_work(k) -> bool:
    underfilled = "grid_ctas" in k and "sm_count" in k and k["grid_ctas"] < k["sm_count"]
    skinny = "tokens_per_expert" in k and k["tokens_per_expert"] < SMALL_ROWS_PER_EXPERT
    slow = k.get("achieved_bw_fraction", 0.0) < LOW_BW_FRACTION
    return (underfilled or skinny) and slow


def _kernel_evidence(k) -> list:
    names = ("share_of_step", "count_per_step", "grid_ctas", "sm_count", "tokens_per_expert", "achieved_bw_fraction", "backend")
    return [ev(f"kernel_classes[{k['kernel_class']}].{n}", k[n]) for n in names if n in k]


MOE_UNDO = (
    undo("per_user_latency", "median inter-token latency at the served batch is not lower than before"),
    undo("useful_throughput", "tokens/s at the service's concurrency falls"),
    undo("memory_kv_capacity", "the new layout or packing leaves less room for KV cache (fewer concurrent sequences)"),
)

SMALL_EXPERT_KERNELS = RuleSpec(
    id="small-expert-kernels",
    title="Small expert kernels dominate the step",
    requires=("budget", "kernel_classes"),
    explanation=(
        "Each routed expert sees only a few tokens per step, so its GEMMs launch too few CTAs or are too "
        "skinny to pull full bandwidth: the hardware is latency-limited, not byte-limited."
    ),
    check=Check(
        measure="kernel dimensions, occupancy and DRAM bytes of the MoE kernels (ncu) at the same routing pattern",
        confirms="grids smaller than the SM count and achieved bandwidth well under peak while bytes match the estimate",
        refutes="the MoE kernels already run near peak bandwidth, or move more bytes than the per-rank estimate",
    ),
    remedies=(
        RemedySpec(action="use a grouped/fused MoE kernel that packs all local experts into one launch", cost="kernel change or engine upgrade", risk="low if the engine ships it; validate numerics"),
        RemedySpec(action="raise the decode batch so each expert sees more rows", cost="configuration", risk="per-user latency can rise", share=0.5),
    ),
    undo=MOE_UNDO,
)

MOE_UNTUNED = RuleSpec(
    id="moe-untuned-config",
    title="Fused-MoE kernel runs without a tuned config for this GPU",
    requires=("budget", "kernel_classes"),
    explanation="Without a tuned tile/stage config the fused-MoE kernel falls back to defaults chosen for another shape or GPU.",
    check=Check(
        measure="the engine's log line about missing MoE configs, then a microbenchmark with a tuned config at the served batch",
        confirms="the tuned config lowers the MoE kernel time at the same batch and routing",
        refutes="the tuned and default configs time the same",
    ),
    remedies=(RemedySpec(action="generate a tuned config for this GPU, expert shape and dtype (the engine's tuning script)", cost="an hour of tuning", risk="low; configs are per batch bucket"),),
    undo=MOE_UNDO[:2],
)

SLOW_KERNEL_PATH = RuleSpec(
    id="slow-kernel-path",
    title="A slow kernel or backend was chosen",
    requires=("budget", "kernel_classes"),
    explanation=(
        "A large kernel class runs far below peak bandwidth on a named backend: a quantized path without a fast "
        "kernel, or attention dispatched to a generic backend."
    ),
    check=Check(
        measure="the same step with the alternative backend or quantization kernel forced, and the class's DRAM bytes in ncu",
        confirms="the alternative moves the same bytes in less time",
        refutes="every available backend lands at the same time (the work itself is the limit)",
    ),
    remedies=(RemedySpec(action="select the fast backend explicitly (attention backend flag, quantization kernel)", cost="configuration", risk="check output quality and supported shapes"),),
    undo=(undo("quality", "evaluation scores drop with the other backend or quantization kernel"), MOE_UNDO[0]),
)

SORT_SAMPLING = RuleSpec(
    id="sort-sampling",
    title="Sort-based sampling takes a visible share of the step",
    requires=("budget", "kernel_classes", "server"),
    explanation="Top-p/top-k by sorting the whole vocabulary is a large sort per sequence per step; sort-free samplers avoid it.",
    check=Check(
        measure="sampling kernel time per step with greedy decoding vs. the production sampling parameters",
        confirms="the sampling kernels shrink when sorting is avoided (greedy or a sort-free sampler)",
        refutes="sampling time stays the same without sorting",
    ),
    remedies=(RemedySpec(action="switch to the engine's sort-free (rejection-based) top-p/top-k sampler", cost="configuration", risk="sampling distribution must stay the same; compare outputs"),),
    undo=(undo("quality", "sampled outputs differ in distribution from the sorting sampler"),),
)


class KernelRules(RuleSet):
    @rule(
        SMALL_EXPERT_KERNELS,
        AS.k << KernelClass(kernel_class="moe", share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda k, share: share >= MIN_SHARE and small_expert_work(k)),
    )
    def small_expert_kernels(self, k, share, device):
        return Finding(
            evidence=_kernel_evidence(k) + [ev("budget.device_ms", device, "ms")],
            removable_ms=headroom_ms(device, share, k.get("achieved_bw_fraction")),
        )

    @rule(
        MOE_UNTUNED,
        AS.k << KernelClass(kernel_class="moe", tuned_config=False, share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda share: share >= MIN_SHARE),
    )
    def moe_untuned_config(self, k, share, device):
        return Finding(
            evidence=_kernel_evidence(k) + [ev("kernel_classes[moe].tuned_config", False)],
            removable_ms=headroom_ms(device, share, k.get("achieved_bw_fraction")),
        )

    @rule(
        SLOW_KERNEL_PATH,
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
        SORT_SAMPLING,
        Server(sampling=P(lambda s: "sort" in s.lower())),
        AS.k << KernelClass(kernel_class="sampling", share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda share: share >= 0.03),
    )
    def sort_sampling(self, k, share, device):
        return Finding(evidence=_kernel_evidence(k) + [ev("server.sampling", "sort")], removable_ms=device * share)
