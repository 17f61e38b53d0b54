"""Work that piles onto one rank or waits for memory: expert-load imbalance and KV-cache pressure.

An EP step lasts as long as its busiest rank, so balanced ranks would each do the mean load;
the MoE time the busiest rank spends above the mean is what balancing can recover. A KV cache
that runs out preempts sequences, which then redo their prefill inside other streams' decode.
"""

from diagnoser.engine import AS, MATCH, NOT, TEST, W, Budget, Finding, KernelClass, Memory, Routing, RuleSet, ev, load_specs, rule

SPECS = load_specs(__file__)

# The busiest EP rank carrying 25 % more tokens than the mean is beyond routing noise at decode batch sizes.
IMBALANCE = 1.25
# A cache over 95 % full with requests queued is out of room, not merely well used.
KV_FULL = 0.95


def balanced_saving_ms(moe_ms: float, imbalance: float) -> float:
    """MoE time the busiest rank would lose at the mean load: ``T x (1 - mean/max)``."""
    return moe_ms * (1.0 - 1.0 / imbalance)


class CapacityRules(RuleSet):
    @rule(
        SPECS["ep-imbalance"],
        AS.r << Routing(imbalance=MATCH.imbalance, ranks=MATCH.ranks),
        AS.k << KernelClass(kernel_class="moe", share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda imbalance: imbalance >= IMBALANCE),
    )
    def ep_imbalance_measured(self, r, imbalance, ranks, k, share, device):
        return Finding(
            evidence=[ev("routing.imbalance", imbalance), ev("routing.ranks", ranks), ev("kernel_classes[moe].share_of_step", share)],
            removable_ms=balanced_saving_ms(device * share, imbalance),
            detail=f"The busiest of {ranks} EP ranks carries {imbalance:.2f}x the mean load.",
        )

    @rule(
        SPECS["ep-imbalance"],
        Routing(imbalance=MATCH.imbalance, ranks=MATCH.ranks),
        NOT(Budget(device_ms=W())),
        TEST(lambda imbalance: imbalance >= IMBALANCE),
    )
    def ep_imbalance_indicated(self, imbalance, ranks):
        return Finding(
            evidence=[ev("routing.imbalance", imbalance), ev("routing.ranks", ranks)],
            detail=f"The busiest of {ranks} EP ranks carries {imbalance:.2f}x the mean load.",
        )

    @rule(SPECS["kv-cache-pressure"], Memory(preemptions=MATCH.n), TEST(lambda n: n > 0))
    def preempting(self, n):
        return Finding(evidence=[ev("memory.preemptions", n)])

    @rule(
        SPECS["kv-cache-pressure"],
        Memory(kv_cache_usage=MATCH.usage, waiting_requests=MATCH.waiting),
        TEST(lambda usage, waiting: usage >= KV_FULL and waiting > 0),
    )
    def kv_full(self, usage, waiting):
        return Finding(evidence=[ev("memory.kv_cache_usage", usage), ev("memory.waiting_requests", waiting)])
