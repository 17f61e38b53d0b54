"""Putting ranks on one clock.

    align_on_first_collective(traces, ops) -> list[str]

Kineto timestamps come from each host's clock (plus ``baseTimeNanoseconds`` when written), so
ranks on different hosts can disagree by more than a whole decode step. Every participant
leaves a collective at nearly the same instant (the data is complete everywhere at once), so
the end of the first collective is a shared event: shifting each rank's ``clock_offset_ns`` to
make those ends coincide aligns the ranks to within the collective's own end skew.
"""

from __future__ import annotations

import numpy as np

from diagnoser.trace.model import RankTrace
from diagnoser.trace.ops import IS_KERNEL, DeviceOps


def align_on_first_collective(traces: list[RankTrace], ops: list[DeviceOps]) -> list[str]:
    """Adjust ``clock_offset_ns`` in place; returns notes (why it could not align, or by how much it moved)."""
    ends = {}
    for trace, o in zip(traces, ops):
        comm = np.flatnonzero(o.is_comm & (o.source == IS_KERNEL))
        if not len(comm):
            return [f"rank {trace.rank} has no collective kernel: ranks left on their trace clocks"]
        ends[trace.rank] = int(o.end[comm].min())
    reference = traces[0]
    anchor = ends[reference.rank] + reference.clock_offset_ns
    notes = []
    for trace in traces[1:]:
        shift = anchor - ends[trace.rank] - trace.clock_offset_ns
        trace.clock_offset_ns += shift
        notes.append(
            f"rank {trace.rank} shifted by {shift / 1000:.1f} µs to end its first collective with rank {reference.rank}"
        )
    return notes
