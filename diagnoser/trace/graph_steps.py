"""Decode steps of a trace with no marks but CUDA-graph launches: which launches make one step.

    graph_launches_per_step(starts, signature=None) -> (launches per step, first step's first launch)

Full graphs replay one graph per step; piecewise graphs a fixed group of pieces with short gaps
between them; a speculative decoder the draft's graphs and then the target's. The gaps between
launches and what each launch replayed tell these apart.
"""

from __future__ import annotations

import numpy as np

from diagnoser.trace.model import RankTrace
from diagnoser.trace.ops import IS_KERNEL, DeviceOps
from diagnoser.trace.step_pattern import MIN_STEPS, repeats

# Between steps the host schedules, samples and detokenizes, so the gap before a step's first
# graph launch must exceed every gap between the pieces of one step by this factor.
STEP_GAP_FACTOR = 3.0
MAX_PIECES_PER_STEP = 128


def graph_launches_per_step(starts: np.ndarray, signature: np.ndarray | None = None) -> tuple[int, int]:
    """(launches per step, index of the first step's first launch) from sorted launch times.

    Piecewise graphs replay a fixed number of pieces per step, separated by short gaps. The
    gaps before each step's first launch must then be the longest ones, clearly apart from
    every gap inside a step, and evenly spaced in launch count. Each clear split of the sorted
    gaps is tried from the lowest; without such a pattern every launch starts a step
    (full-graph decode). ``signature`` (one value per launch: what it replayed) then checks that
    every step replays the same graphs; see ``_whole_steps``.
    """
    gaps = np.diff(starts)
    if len(gaps) < 3:
        return 1, 0
    ordered = np.sort(gaps)
    for split in np.flatnonzero(ordered[1:] > STEP_GAP_FACTOR * ordered[:-1]):
        boundary = np.flatnonzero(gaps > ordered[split])  # gap just before each step's first launch
        spacing = np.unique(np.diff(boundary))
        if len(boundary) >= 2 and len(spacing) == 1 and 2 <= spacing[0] <= MAX_PIECES_PER_STEP:
            pieces = int(spacing[0])
            return _whole_steps(gaps, signature, pieces, int(boundary[0] + 1) % pieces)
    return _whole_steps(gaps, signature, 1, 0)


def _whole_steps(gaps: np.ndarray, signature: np.ndarray | None, pieces: int, offset: int) -> tuple[int, int]:
    """Groups of launches that differ from their neighbours are parts of one step, not steps.

    A step can hold several long host gaps: a speculative decoder launches the draft's graphs,
    waits, then the target's; a training step its forward and backward. The gaps then cut each
    step into unlike groups, while a real step repeats what the one before it replayed. The
    shortest multiple of the grouping that repeats is the step, opening at the group boundary
    with the longest gaps.
    """
    if signature is None or repeats(signature, pieces):
        return pieces, offset
    for period in range(2 * pieces, min(len(signature) // MIN_STEPS, MAX_PIECES_PER_STEP) + 1, pieces):
        if repeats(signature, period):
            before = np.append(0, gaps)  # before[i]: the gap just before launch i
            return period, max(((offset + j) % period for j in range(0, period, pieces)), key=lambda o: before[o::period].mean())
    return pieces, offset


def replay_signature(trace: RankTrace, ops: DeviceOps, launch_rows: np.ndarray) -> np.ndarray:
    """Per graph launch, a number that tells different graphs apart: how many ops it replayed
    and the name of its first kernel (graph ids are not in every trace format)."""
    slot_of = np.full(len(trace.runtime), -1, dtype=np.int64)
    slot_of[launch_rows] = np.arange(len(launch_rows))
    replayed = np.flatnonzero(ops.by_graph & (ops.launch_row >= 0))
    replayed = replayed[slot_of[ops.launch_row[replayed]] >= 0]
    counts = np.bincount(slot_of[ops.launch_row[replayed]], minlength=len(launch_rows))
    kernels = replayed[ops.source[replayed] == IS_KERNEL]
    slots, first = np.unique(slot_of[ops.launch_row[kernels]], return_index=True)  # ops are start-sorted
    first_name = np.full(len(launch_rows), -1, dtype=np.int64)
    first_name[slots] = trace.kernels["name"][ops.row[kernels[first]]]
    return counts * (len(trace.strings) + 1) + first_name + 1
