"""Per-rank decode bound: bytes each rank must move per step, over bandwidth, plus compute.

``compute_bound`` answers for a pinned ``Workload``; ``floor_from_bytes`` for a bare
bytes/bandwidth pair (the synthetic single-rank case, or a figure someone else computed).
"""

from diagnoser.bound.estimate import BoundReport, RankEstimate, active_parameters, compute_bound
from diagnoser.bound.experts import distinct_experts_per_rank, expected_distinct_experts, rows_per_touched_expert
from diagnoser.bound.floor import FloorResult, compare_with_observation, floor_from_bytes

__all__ = [
    "BoundReport",
    "FloorResult",
    "RankEstimate",
    "active_parameters",
    "compare_with_observation",
    "compute_bound",
    "distinct_experts_per_rank",
    "expected_distinct_experts",
    "floor_from_bytes",
    "rows_per_touched_expert",
]
