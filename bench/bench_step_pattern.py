"""Bench: finding the steps of an unmarked eager decode loop, at server-capture sizes.

    .venv/bin/python bench/bench_step_pattern.py [--steps 28000]

A 36-kernel step repeated ``--steps`` times (28,000 steps is about a million kernels, a long
nsys capture of an eager server), and the same number of kernels in random order, which has no
pattern and so makes the search try every candidate period. Prints the best of three wall
times of ``pattern_steps`` for each. No other tool infers decode steps, so there is no peer.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from diagnoser.trace.step_pattern import pattern_steps

KERNELS = 36
KERNEL_GAP_NS, STEP_GAP_NS = 10_000, 300_000


def eager_loop(steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Interned kernel names, launch times and D2H times of a loop like the tests' one."""
    names = np.tile(np.arange(KERNELS, dtype=np.int32) % 24, steps)  # layer kernels repeat inside a step
    names[::KERNELS] = 100  # embedding
    names[KERNELS - 1 :: KERNELS] = 101  # sampler
    within = np.arange(KERNELS) * KERNEL_GAP_NS
    step_len = KERNELS * KERNEL_GAP_NS + STEP_GAP_NS
    launches = (np.arange(steps)[:, None] * step_len + within[None, :]).ravel().astype(np.int64)
    d2h = np.arange(steps, dtype=np.int64) * step_len + KERNELS * KERNEL_GAP_NS
    return names, launches, d2h


def best_of(runs: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=28_000)
    args = parser.parse_args()
    names, launches, d2h = eager_loop(args.steps)
    seconds, found = best_of(3, lambda: pattern_steps(names, launches, d2h))
    assert found is not None and found.kernels_per_step == KERNELS and len(found.first) == args.steps
    print(f"eager loop: {len(names):,} kernels, {len(found.first):,} steps of {found.kernels_per_step} found in {seconds:.2f} s "
          f"({len(names) / seconds / 1e6:.1f} M kernels/s)")
    shuffled = np.random.default_rng(0).permutation(names)
    seconds, found = best_of(3, lambda: pattern_steps(shuffled, launches, d2h))
    assert found is None
    print(f"no pattern: {len(names):,} kernels searched in {seconds:.2f} s, none found (whole trace kept)")


if __name__ == "__main__":
    main()
