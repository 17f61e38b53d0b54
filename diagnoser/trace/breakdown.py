"""HTA-compatible temporal breakdown and communication/computation overlap of each step.

    temporal_breakdowns(ops, rows, group, groups) -> TemporalBreakdowns   (many steps at once, with the
                                                                           communication/computation overlap)

These reproduce the definitions of Meta's Holistic Trace Analysis (see shared/notes/hta.md
§3.3 and §3.6) so a user can check our parser against a tool they already trust: span = first
start to last end of the step's device work; idle = span minus the union of all device work;
compute = union of non-communication, non-copy work; non-compute = the rest. Overlap is the
share of the communication union also covered by the compute union.

Deliberate differences from HTA: (1) kernels replayed by a graph launch are counted (HTA's
load filter keeps them only through the launch's correlation, and several of its analyses
skip them); (2) communication is what ``kernel_classes.json`` says it is, so PyTorch
symmetric-memory and vLLM custom all-reduces count as communication, where HTA counts them
as compute; (3) ``cuda_sync`` rows are not device work here (HTA puts those carrying a stream
into the span).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnoser.trace import intervals as iv
from diagnoser.trace.ops import IS_COPY, DeviceOps
from diagnoser.trace.steps import op_bounds


@dataclass(frozen=True)
class TemporalBreakdowns:
    """Per step, in ns; the overlap is of communication time that compute overlaps, None without any."""

    span_ns: list[int]
    idle_ns: list[int]
    compute_ns: list[int]
    non_compute_ns: list[int]
    comm_comp_overlap: list[float | None]


def temporal_breakdowns(ops: DeviceOps, rows: np.ndarray, group: np.ndarray, groups: int) -> TemporalBreakdowns:
    """HTA's per-step figures of ``groups`` steps at once: ``rows`` are the steps' ops end to end (each
    step's ascending, so start-sorted), ``group`` each one's step. Each union is one pass over all the
    steps' ops (``intervals.union_by_group``), where merging a step at a time cost a dozen numpy calls
    per step. The overlap's intersection is |comm| + |compute| - |comm or compute|: exact in integers."""
    start, end = ops.start[rows], ops.end[rows]
    is_comm = ops.is_comm[rows]
    is_copy = ops.source[rows] == IS_COPY
    compute_rows = ~is_comm & ~is_copy

    def union(mask: np.ndarray) -> list[int]:
        return iv.union_by_group(group[mask], start[mask], end[mask], groups).tolist()

    busy = iv.union_by_group(group, start, end, groups).tolist()
    compute, comm, either = union(compute_rows), union(is_comm), union(~is_copy)
    first, last = op_bounds(ops, rows, group, groups)
    span = (last - first).tolist()
    idle = [s - b for s, b in zip(span, busy)]
    return TemporalBreakdowns(
        span_ns=span,
        idle_ns=idle,
        compute_ns=compute,
        non_compute_ns=[s - i - c for s, i, c in zip(span, idle, compute)],
        comm_comp_overlap=[(m + c - e) / m if m else None for m, c, e in zip(comm, compute, either)],
    )
