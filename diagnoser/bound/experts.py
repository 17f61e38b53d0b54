"""How many distinct routed experts a decode step reads.

A batch of T tokens, each routed to k of E experts, touches far fewer than T*k experts once
tokens share experts, and never more than E. Reading "active parameters" as traffic assumes
one token (T=1); reading the whole model assumes T -> infinity. The union in between is what
the weights term of the bound must count.
"""

from __future__ import annotations

from collections.abc import Sequence


def expected_distinct_experts(num_experts: int, top_k: int, tokens: float, local_experts: float | None = None) -> float:
    """Expected experts touched among ``local_experts`` of ``num_experts`` under uniform routing.

    A token skips a given expert with probability (1 - k/E), exactly, for a uniform k-subset;
    tokens are independent, so the expert stays cold with probability (1 - k/E)^T. Since
    1 - (1 - p)^T is concave in p, uniform routing gives the largest union for a fixed k:
    skewed or correlated routing touches fewer experts, so this is an upper bound on bytes.
    """
    if tokens <= 0:
        return 0.0
    local = num_experts if local_experts is None else local_experts
    return local * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def rows_per_touched_expert(num_experts: int, top_k: int, tokens: float) -> float:
    """Mean rows one expert GEMM gets: the batch's T*k routed slots over the experts they land on.

    This, not the batch size, decides whether an expert GEMM is a skinny matrix-vector product.
    """
    touched = expected_distinct_experts(num_experts, top_k, tokens)
    return tokens * top_k / touched if touched else 0.0


def distinct_experts_per_rank(tokens_per_expert: Sequence[int], ep: int) -> list[int]:
    """Touched experts on each EP rank from a measured per-expert token histogram.

    Experts are placed contiguously, E/ep per rank, as vLLM and SGLang do by default.
    """
    if len(tokens_per_expert) % ep:
        raise ValueError(f"{len(tokens_per_expert)} experts do not split evenly over ep={ep}")
    per_rank = len(tokens_per_expert) // ep
    return [
        sum(1 for count in tokens_per_expert[r * per_rank : (r + 1) * per_rank] if count > 0) for r in range(ep)
    ]
