"""Collectives across ranks: who arrived when, how long the others waited, what the transfer cost.

    rank_collectives(trace, ops, rows, group, groups, compute) -> list[list[Arrival]]   many steps at once
    match_collectives(per_rank) -> list[Collective]

A collective kernel starts on each rank when that rank gets there and ends when the data has
moved, which cannot happen before the last participant arrives. So, on a common clock, the
time from the first to the last arrival is waiting (caused by the late rank's preceding work),
and the time from the last arrival to the departures is the transfer. The k-th collective of
the same kind in a step is taken to be the same call on every rank (collectives are issued in
program order on each process group). Non-NCCL all-reduces count as collectives: the kernel
class table decides.

Where the reader found a message size (the kernel's ``msg_bytes`` column), the transfer gets an
effective bandwidth: algorithm bandwidth, message bytes / transfer time, in GB/s (1e9 B/s),
with the message the larger of the input and output buffers (nccl-tests' "algbw"; no bus-bandwidth
factor, which would need the algorithm). Dividing by the transfer alone, not the kernel
duration, keeps the wait for a late peer from passing for a slow link.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from diagnoser.trace import intervals as iv
from diagnoser.trace.classes import classify
from diagnoser.trace.intervals import covered_between
from diagnoser.trace.model import RankTrace
from diagnoser.trace.ops import IS_KERNEL, DeviceOps
from diagnoser.trace.steps import op_bounds


@dataclass(frozen=True)
class Arrival:
    rank: int
    op: str
    implementation: str
    ordinal: int  # k-th collective of this (op, implementation) in the step on this rank
    start: int  # common clock
    end: int
    compute_before_ns: int  # compute on this rank since its previous collective (or the step start)
    message_bytes: int = 0  # 0: unknown


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
    message_bytes: int | None = None  # the largest size the ranks' kernels recorded

    @property
    def wait_ns(self) -> int:
        return self.last_arrival - self.first_arrival

    @property
    def transfer_ns(self) -> int:
        return max(0, self.departure - self.last_arrival)

    @property
    def interval_ns(self) -> int:
        return max(self.departure, self.last_arrival) - self.first_arrival

    @property
    def bandwidth_gbs(self) -> float | None:
        """Algorithm bandwidth of the transfer (bytes per ns is GB/s); None without a size or a transfer."""
        if not self.message_bytes or self.transfer_ns <= 0:
            return None
        return self.message_bytes / self.transfer_ns


def rank_collectives(
    trace: RankTrace, ops: DeviceOps, rows: np.ndarray, group: np.ndarray, groups: int, compute: iv.IntervalSet
) -> list[list[Arrival]]:
    """This rank's collectives in each of ``groups`` steps at once: ``rows`` are the steps' ops end to end
    (each step's ascending, so start-sorted and its first op its earliest), ``group`` each one's step;
    ``compute`` is the rank's merged compute time. The compute before each collective is one prefix-sum
    pass over the stretch of ``compute`` the steps span, where a step at a time cost a pass per step."""
    step_start, _ = op_bounds(ops, rows, group, groups)
    picked = ops.is_comm[rows] & (ops.source[rows] == IS_KERNEL)
    mine, rows = group[picked], rows[picked]
    kernel_rows = ops.row[rows]
    starts, ends = ops.start[rows], ops.end[rows]
    sizes = trace.kernels["msg_bytes"][kernel_rows] if "msg_bytes" in trace.kernels else np.zeros(len(rows), np.int64)
    out: list[list[Arrival]] = [[] for _ in range(groups)]
    if not len(rows):
        return out
    # compute since this rank's previous collective in the step ended (or since the step began)
    since = iv.running_max_before(mine, ends, step_start)
    compute_before = covered_between(iv.clip(compute, int(step_start[mine].min()), int(starts.max())), since, starts)
    names = [trace.strings[n] for n in trace.kernels["name"][kernel_rows].tolist()]
    ordinals: Counter[tuple[str, str, int]] = Counter()
    offset = trace.clock_offset_ns
    # a step holds a collective or two: each name's class is looked up (remembered), no np.unique
    for g, name, start, end, before, size in zip(
        mine.tolist(), names, starts.tolist(), ends.tolist(), compute_before.tolist(), sizes.tolist()
    ):
        c = classify(name)
        key = (c.op or "other", c.implementation or "unknown")
        out[g].append(Arrival(trace.rank, *key, ordinals[(*key, g)], start + offset, end + offset, before, size))
        ordinals[(*key, g)] += 1
    return out


def _median(values: list[int]) -> float:
    """``np.median`` of a few integers, as it computes it (the two middle values' mean in float64),
    without its per-call cost: one call per collective per step."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return float(ordered[middle]) if len(ordered) % 2 else (float(ordered[middle - 1]) + float(ordered[middle])) / 2


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
        departure = first + int(_median([a.end - first for a in members]))
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
                message_bytes=max(a.message_bytes for a in members) or None,
            )
        )
    return sorted(out, key=lambda c: c.first_arrival)
