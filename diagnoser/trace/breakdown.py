"""HTA-compatible temporal breakdown and communication/computation overlap of one step.

    temporal_breakdown(ops, rows) -> TemporalBreakdown
    comm_comp_overlap(ops, rows) -> float | None

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


def _sets(ops: DeviceOps, rows: np.ndarray) -> tuple[iv.IntervalSet, iv.IntervalSet, iv.IntervalSet]:
    start, end = ops.start[rows], ops.end[rows]
    compute = ~ops.is_comm[rows] & (ops.source[rows] != IS_COPY)
    return (
        iv.merge(start, end),
        iv.merge(start[compute], end[compute]),
        iv.merge(start[ops.is_comm[rows]], end[ops.is_comm[rows]]),
    )


def temporal_breakdown(ops: DeviceOps, rows: np.ndarray) -> TemporalBreakdown:
    if len(rows) == 0:
        return TemporalBreakdown(0, 0, 0, 0)
    busy, compute, _ = _sets(ops, rows)
    span = int(busy[1][-1] - busy[0][0])
    idle = span - iv.total(busy)
    compute_ns = iv.total(compute)
    return TemporalBreakdown(span, idle, compute_ns, span - idle - compute_ns)


def comm_comp_overlap(ops: DeviceOps, rows: np.ndarray) -> float | None:
    """Fraction (0..1) of communication time that compute overlaps; None without communication."""
    _, compute, comm = _sets(ops, rows)
    comm_total = iv.total(comm)
    if comm_total == 0:
        return None
    return iv.total(iv.intersect(comm, compute)) / comm_total
