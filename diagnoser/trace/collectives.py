"""Collectives across ranks: who arrived when, how long the others waited, what the transfer cost.

    rank_collectives(trace, ops, step) -> list[Arrival]
    match_collectives(per_rank) -> list[Collective]

A collective kernel starts on each rank when that rank gets there and ends when the data has
moved, which cannot happen before the last participant arrives. So, on a common clock, the
time from the first to the last arrival is waiting (caused by the late rank's preceding work),
and the time from the last arrival to the departures is the transfer. The k-th collective of
the same kind in a step is taken to be the same call on every rank (collectives are issued in
program order on each process group). Non-NCCL all-reduces count as collectives: the kernel
class table decides.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from diagnoser.trace import intervals as iv
from diagnoser.trace.classes import classify_names
from diagnoser.trace.intervals import covered_between
from diagnoser.trace.model import RankTrace
from diagnoser.trace.ops import IS_KERNEL, DeviceOps
from diagnoser.trace.steps import Step


@dataclass(frozen=True)
class Arrival:
    rank: int
    op: str
    implementation: str
    ordinal: int  # k-th collective of this (op, implementation) in the step on this rank
    start: int  # common clock
    end: int
    compute_before_ns: int  # compute on this rank since its previous collective (or the step start)


@dataclass(frozen=True)
class Collective:
    op: str
    implementation: str
    ordinal: int
    ranks: tuple[int, ...]
    first_arrival: int
    last_arrival: int
    departure: int  # median end over ranks
    late_rank: int
    late_rank_compute_ns: int

    @property
    def wait_ns(self) -> int:
        return self.last_arrival - self.first_arrival

    @property
    def transfer_ns(self) -> int:
        return max(0, self.departure - self.last_arrival)

    @property
    def interval_ns(self) -> int:
        return max(self.departure, self.last_arrival) - self.first_arrival


def rank_collectives(trace: RankTrace, ops: DeviceOps, step: Step, compute: iv.IntervalSet) -> list[Arrival]:
    """This rank's collectives in the step; ``compute`` is the rank's merged compute time."""
    rows = step.ops[ops.is_comm[step.ops] & (ops.source[step.ops] == IS_KERNEL)]
    rows = rows[np.argsort(ops.start[rows], kind="stable")]
    classes, index = classify_names(trace.strings, trace.kernels["name"][ops.row[rows]])
    keys = [(c.op or "other", c.implementation or "unknown") for c in classes]
    starts, ends = ops.start[rows], ops.end[rows]
    step_start = int(ops.start[step.ops].min()) if len(step.ops) else 0
    # compute since this rank's previous collective ended (or since the step began)
    since = np.maximum.accumulate(np.concatenate([[step_start], ends[:-1]])) if len(rows) else starts
    compute_before = covered_between(compute, since, starts)
    ordinals: Counter[tuple[str, str]] = Counter()
    out = []
    for j, k in enumerate(index):
        key = keys[k]
        out.append(
            Arrival(
                trace.rank,
                key[0],
                key[1],
                ordinals[key],
                int(starts[j]) + trace.clock_offset_ns,
                int(ends[j]) + trace.clock_offset_ns,
                int(compute_before[j]),
            )
        )
        ordinals[key] += 1
    return out


def match_collectives(per_rank: list[list[Arrival]]) -> list[Collective]:
    groups: dict[tuple[str, str, int], list[Arrival]] = {}
    for arrivals in per_rank:
        for a in arrivals:
            groups.setdefault((a.op, a.implementation, a.ordinal), []).append(a)
    out = []
    for (op, impl, ordinal), members in groups.items():
        late = max(members, key=lambda a: a.start)
        first = min(a.start for a in members)
        # median on offsets from the first arrival: epoch-ns values lose precision as float64
        departure = first + int(np.median([a.end - first for a in members]))
        out.append(
            Collective(
                op=op,
                implementation=impl,
                ordinal=ordinal,
                ranks=tuple(a.rank for a in members),
                first_arrival=first,
                last_arrival=late.start,
                departure=departure,
                late_rank=late.rank,
                late_rank_compute_ns=late.compute_before_ns,
            )
        )
    return sorted(out, key=lambda c: c.first_arrival)
