"""HTA-compatible temporal breakdown and communication/computation overlap of one step.

    temporal_breakdown(ops, rows) -> TemporalBreakdown   (with the communication/computation overlap)

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


@dataclass(frozen=True)
class TemporalBreakdown:
    span_ns: int
    idle_ns: int
    compute_ns: int
    non_compute_ns: int
    comm_comp_overlap: float | None  # fraction (0..1) of communication time that compute overlaps; None without any


def temporal_breakdown(ops: DeviceOps, rows: np.ndarray) -> TemporalBreakdown:
    """Both of HTA's per-step figures from one set of merges (each costs a few numpy calls per step)."""
    if len(rows) == 0:
        return TemporalBreakdown(0, 0, 0, 0, None)
    start, end = ops.start[rows], ops.end[rows]
    is_comm = ops.is_comm[rows]
    compute_rows = ~is_comm & (ops.source[rows] != IS_COPY)
    busy = iv.merge(start, end)
    compute = iv.merge(start[compute_rows], end[compute_rows])
    comm = iv.merge(start[is_comm], end[is_comm])
    span = int(busy[1][-1] - busy[0][0])
    idle = span - iv.total(busy)
    compute_ns = iv.total(compute)
    comm_total = iv.total(comm)
    overlap = iv.total(iv.intersect(comm, compute)) / comm_total if comm_total else None
    return TemporalBreakdown(span, idle, compute_ns, span - idle - compute_ns, overlap)
