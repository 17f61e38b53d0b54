"""Per-rank decode bound: bytes each rank must move per step, over bandwidth, plus compute."""
