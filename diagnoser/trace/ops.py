"""Device operations of one rank joined to the host calls that launched them.

Kernels and copies are concatenated into one start-sorted view because every analysis
(steps, budget, collectives) asks the same questions of both: when did it run, what class is
it, and when did the host finish issuing it. The join is on correlation id; every kernel
replayed by a ``cudaGraphLaunch`` shares that launch's id, so graph kernels are kept and
point at their graph launch (HTA drops them from launch statistics).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnoser.trace.classes import classify_names
from diagnoser.trace.model import CopyKind, RankTrace, RuntimeKind, narrowest

IS_KERNEL, IS_COPY = 0, 1


@dataclass
class DeviceOps:
    start: np.ndarray
    end: np.ndarray
    source: np.ndarray  # IS_KERNEL or IS_COPY
    # row numbers are int32 (a rank of 2**31 ops would be 100 GB of JSON): at 10^7 ops each byte is 10 MB
    row: np.ndarray  # row in trace.kernels or trace.copies
    is_comm: np.ndarray
    is_d2h: np.ndarray
    is_h2d: np.ndarray
    copy_bytes: np.ndarray  # bytes a copy moved; 0 for kernels and where the trace has no size; narrowest type
    launch_row: np.ndarray  # row in trace.runtime, -1 when no launching call was recorded
    launch_start: np.ndarray  # -1 when unknown
    by_graph: np.ndarray  # launched by a graph launch
    matmul: np.ndarray  # row in trace.shapes of the host matmul op that launched it, -1 if none; narrowest type
    runtime_end: np.ndarray  # trace.runtime's ends themselves, not a copy: see launch_end

    def __len__(self) -> int:
        return len(self.start)

    def launch_end(self, index: np.ndarray) -> np.ndarray:
        """When the call that launched each op of ``index`` returned (-1 when unknown): read through
        ``launch_row`` where asked, as only the budget's gaps ask, not kept per op (80 MB at 10^7 ops)."""
        rows = self.launch_row[index]
        if not len(self.runtime_end):
            return np.full(len(rows), -1, dtype=np.int64)
        return np.where(rows >= 0, self.runtime_end[np.maximum(rows, 0)], -1)


def launch_rows(trace: RankTrace, correlation: np.ndarray) -> np.ndarray:
    """For each correlation id, the runtime row that carries it (-1 if none)."""
    rt_corr = trace.runtime["correlation"] if len(trace.runtime) else np.zeros(0, np.int64)
    valid = np.flatnonzero(rt_corr >= 0)
    order = valid[np.argsort(rt_corr[valid], kind="stable")]
    sorted_corr = rt_corr[order]
    pos = np.searchsorted(sorted_corr, correlation)
    pos_clipped = np.minimum(pos, max(len(sorted_corr) - 1, 0))
    found = (len(sorted_corr) > 0) & (correlation >= 0)
    if len(sorted_corr):
        found &= sorted_corr[pos_clipped] == correlation
    return np.where(found, order[pos_clipped] if len(order) else -1, -1).astype(np.int32)


def matmul_rows(trace: RankTrace, launch_row: np.ndarray) -> np.ndarray:
    """For each launch, the innermost priced matmul op enclosing the call on the same thread (-1 if none)."""
    out = np.full(len(launch_row), -1, dtype=np.int32)
    shapes, rt = trace.shapes, trace.runtime
    if not len(shapes) or not len(rt):
        return out
    known = np.flatnonzero(launch_row >= 0)
    call_start, call_tid = rt["start"][launch_row[known]], rt["tid"][launch_row[known]]
    for tid in np.unique(shapes["tid"]):
        rows = np.flatnonzero(shapes["tid"] == tid)
        rows = rows[np.argsort(shapes["start"][rows], kind="stable")]
        mine = np.flatnonzero(call_tid == tid)
        pos = np.searchsorted(shapes["start"][rows], call_start[mine], side="right") - 1
        candidate = rows[np.maximum(pos, 0)]
        inside = (pos >= 0) & (shapes["end"][candidate] >= call_start[mine])
        out[known[mine]] = np.where(inside, candidate, -1)
    return out


def device_ops(trace: RankTrace) -> DeviceOps:
    k, c = trace.kernels, trace.copies
    nk, nc = len(k), len(c)
    k_comm = np.zeros(nk, dtype=bool)
    if nk:
        classes, index = classify_names(trace.strings, k["name"])
        k_comm = np.array([cl.is_communication for cl in classes], dtype=bool)[index]

    def col(table, name, n):
        return table[name] if n else np.zeros(0, np.int64)

    start = np.concatenate([col(k, "start", nk), col(c, "start", nc)])
    order = np.argsort(start, kind="stable")
    start = start[order]

    def ordered(of_kernels: np.ndarray, of_copies: np.ndarray) -> np.ndarray:
        """A column of the kernels then the copies, in start order; built one at a time, as each is
        80 MB at 10^7 ops."""
        return np.concatenate([of_kernels, of_copies])[order]

    lrow = launch_rows(trace, ordered(col(k, "correlation", nk), col(c, "correlation", nc)))
    known = lrow >= 0
    rt = trace.runtime
    safe = np.where(known, lrow, 0)
    copy_bytes = narrowest(np.maximum(c["bytes"], 0) if nc and "bytes" in c else np.zeros(nc, np.int64))
    return DeviceOps(
        start=start,
        end=ordered(col(k, "end", nk), col(c, "end", nc)),
        source=ordered(np.full(nk, IS_KERNEL, np.int8), np.full(nc, IS_COPY, np.int8)),
        row=ordered(np.arange(nk, dtype=np.int32), np.arange(nc, dtype=np.int32)),
        is_comm=ordered(k_comm, np.zeros(nc, bool)),
        is_d2h=ordered(np.zeros(nk, bool), (c["kind"] == CopyKind.d2h) if nc else np.zeros(0, bool)),
        is_h2d=ordered(np.zeros(nk, bool), (c["kind"] == CopyKind.h2d) if nc else np.zeros(0, bool)),
        copy_bytes=ordered(np.zeros(nk, copy_bytes.dtype), copy_bytes),
        launch_row=lrow,
        launch_start=np.where(known, rt["start"][safe] if len(rt) else -1, -1),
        by_graph=known & ((rt["kind"][safe] == RuntimeKind.graph_launch) if len(rt) else False),
        matmul=narrowest(matmul_rows(trace, lrow)),  # a byte an op where no shapes were recorded, as usual
        runtime_end=rt["end"] if len(rt) else np.zeros(0, np.int64),
    )
