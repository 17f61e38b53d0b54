"""Decode steps in a trace nobody marked: the kernel sequence repeats once per step.

    pattern_steps(names, launch_starts, d2h_starts) -> PatternSteps | None

An eager decode loop at a fixed batch launches the same kernels in the same order every step;
between steps the host samples, detokenizes and schedules, so the launch gap before each step's
first kernel is the longest of its step; and every step copies its sampled tokens to the host.
All three must hold. Blocks repeat inside one forward or training pass too (a single prefill's
kernel sequence is periodic with the layer), but their gaps are not consistently the longest
(the real vLLM prefill in shared/), or they copy nothing back to the host (the real FastVideo
training window, whose 16 transformer blocks have both a steady sequence and a steady gap).

The period is searched for in the last two thirds of the trace (the steady state; the first
steps often warm up allocators and autotuners), or in all of it when that is too short to hold
three steps, then extended backwards over every earlier period that matches. Kernels before
the first whole period, or after the last, belong to no step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_KERNELS_PER_STEP = 8
MIN_STEPS = 3
# Kernels that must equal the kernel one period later: a few may differ (a sampling branch).
SAME_SEQUENCE = 0.99
# Share of periods whose longest launch gap sits at the step boundary, and that copy to the host.
CONSISTENT = 0.8
# Periods tried, from the shortest; each rare kernel name proposes its spacings.
MAX_CANDIDATES = 64


@dataclass(frozen=True)
class PatternSteps:
    kernels_per_step: int
    first: np.ndarray  # index (into the launch-ordered sequence) of each whole step's first kernel


def candidate_periods(seq: np.ndarray, lo: int, hi: int) -> list[int]:
    """Spacings between repeats of the rarest kernel names: a name seen once per step (the LM
    head, the sampler) repeats exactly at the step's length."""
    _, inverse, counts = np.unique(seq, return_inverse=True, return_counts=True)
    found: set[int] = set()
    for name in np.argsort(counts, kind="stable"):
        if counts[name] < MIN_STEPS:
            continue
        spacing = np.diff(np.flatnonzero(inverse == name))
        found.update(int(p) for p in np.unique(spacing) if lo <= p <= hi)
        if len(found) >= MAX_CANDIDATES:
            break
    return sorted(found)


def repeats(seq: np.ndarray, period: int) -> bool:
    """Whether (nearly) every item equals the one ``period`` later."""
    return 0 < period < len(seq) and bool(np.mean(seq[:-period] == seq[period:]) >= SAME_SEQUENCE)


def repeating_period(seq: np.ndarray) -> int | None:
    """The shortest period with which the sequence repeats itself, if it does."""
    return next((p for p in candidate_periods(seq, MIN_KERNELS_PER_STEP, len(seq) // MIN_STEPS) if repeats(seq, p)), None)


def step_offset(gaps: np.ndarray, period: int) -> int | None:
    """Position in the period whose preceding launch gap is the longest in (nearly) every period.
    A gap the trace does not show (before its first kernel) is NaN and judges nothing."""
    rows = gaps[: len(gaps) // period * period].reshape(-1, period)
    offset = int(np.nanargmax(np.nanmedian(rows, axis=0)))
    rest = np.nanmax(np.delete(rows, offset, axis=1), axis=1) if period > 1 else np.zeros(len(rows))
    known = ~np.isnan(rows[:, offset])
    return offset if np.mean(rows[known, offset] > rest[known]) >= CONSISTENT else None


def pattern_steps(names: np.ndarray, launch_starts: np.ndarray, d2h_starts: np.ndarray) -> PatternSteps | None:
    """Whole steps of a repeating kernel sequence; ``names`` and ``launch_starts`` in launch order,
    ``d2h_starts`` the sorted launch times of device-to-host copies."""
    n = len(names)
    tail, period = next(((t, p) for t in (n // 3, 0) if (p := repeating_period(names[t:])) is not None), (0, None))
    if period is None:
        return None
    gaps = np.append(np.nan, np.diff(launch_starts).astype(float))[tail:]  # gaps[i]: before kernel tail + i
    offset = step_offset(gaps, period)
    if offset is None:
        return None
    first = tail + offset
    while first - period >= 0 and repeats(names[first - period : first + period], period):
        first -= period
    starts = np.arange(first, n - period + 1, period)
    if len(starts) < MIN_STEPS:
        return None
    bounds = np.append(launch_starts[starts], launch_starts[starts[-1] + period] if starts[-1] + period < n else np.iinfo(np.int64).max)
    copies_back = np.diff(np.searchsorted(d2h_starts, bounds))
    if np.mean(copies_back > 0) < CONSISTENT:
        return None
    return PatternSteps(kernels_per_step=period, first=starts)
