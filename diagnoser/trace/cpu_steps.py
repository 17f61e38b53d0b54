"""A CPU-only decode loop read as a step budget: the CPU ops stand in for the device work.

    cpu_run(trace) -> RankTrace | None     the trace with its CPU ops as "kernels", or None
    is_cpu_run(trace) -> bool
    host_parts(parts) -> parts              idle time inside a CPU step is host time

A PyTorch-profiler trace of a model run on the CPU has no CUDA activity: the operators
(``aten::mm``, ``aten::sort``, ...) are the work, and the time between them on the engine's
thread is Python and framework overhead. So the outermost operators of that thread become
the rank's device ops (each launched, at its own start, by a zero-length call, so every
existing step and budget rule applies) and everything the budget would call launch or queue
time is host time. A c10d collective lasts until its backend thread finishes it (the caller
waits for it between ops). An op runs inside a named ``record_function`` range is named
``RANGE/op``, so model annotations (``moe_experts``) classify its work as NVTX ranges do.
Every budget built this way says it is a CPU run in the trace's notes and device name.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from diagnoser.trace import intervals as iv
from diagnoser.trace.model import RankTrace, RuntimeKind, Table
from diagnoser.trace.steps import is_step_mark

CPU_DEVICE = "CPU (no CUDA activity: CPU ops are the device part, the gaps between them host time)"
LAUNCH_NAME = "cpu_op (runs on the host)"


def is_cpu_run(trace: RankTrace) -> bool:
    return trace.device_name == CPU_DEVICE


def _engine_thread(trace: RankTrace) -> int:
    """The thread that marks steps, else the one whose operators take the most time."""
    ranges, ops = trace.ranges, trace.cpu_ops
    if len(ranges):
        marked = [is_step_mark(trace.strings[n]) for n in ranges["name"]]
        tids = ranges["tid"][np.array(marked, dtype=bool)]
        if len(tids):
            values, counts = np.unique(tids, return_counts=True)
            return int(values[np.argmax(counts)])
    values = np.unique(ops["tid"])
    busy = [int((ops["end"][ops["tid"] == t] - ops["start"][ops["tid"] == t]).sum()) for t in values]
    return int(values[int(np.argmax(busy))])


def _outermost(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Indices, start-ordered, of the ops no earlier op on the thread encloses."""
    order = np.lexsort((-end, start))
    keep, reach = [], -1
    for i in order.tolist():
        if start[i] >= reach:
            keep.append(i)
            reach = end[i]
        elif end[i] > reach:  # overlaps without nesting (a clock tie): extend, keep it apart
            keep.append(i)
            reach = end[i]
    return np.array(keep, dtype=np.int64)


def _annotated_names(trace: RankTrace, tid: int, start: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Op names prefixed with the innermost enclosing user range on the thread (steps excepted)."""
    strings = list(trace.strings)
    ranges = trace.ranges
    if not len(ranges):
        return names, strings
    mine = np.flatnonzero((ranges["tid"] == tid) & ~np.array([is_step_mark(trace.strings[n]) for n in ranges["name"]], dtype=bool))
    if not len(mine):
        return names, strings
    index = {s: i for i, s in enumerate(strings)}
    out = names.copy()
    r_start, r_end = ranges["start"][mine], ranges["end"][mine]
    width = r_end - r_start
    for k, (t, name) in enumerate(zip(start.tolist(), names.tolist())):
        inside = np.flatnonzero((r_start <= t) & (t < r_end))
        if len(inside):
            label = f"{trace.strings[ranges['name'][mine[inside[np.argmin(width[inside])]]]]}/{trace.strings[name]}"
            if label not in index:
                index[label] = len(strings)
                strings.append(label)
            out[k] = index[label]
    return out, strings


def _collective_ends(trace: RankTrace, start: np.ndarray, end: np.ndarray, names: np.ndarray) -> np.ndarray:
    """Ends of the thread's ops, a CPU collective's extended to its work's end.

    ``c10d::allreduce_`` on the calling thread only enqueues the work; the process group's own
    thread runs it under a ``gloo:all_reduce`` range, and the caller waits for it outside any
    op. So each c10d op is taken to last until the end of the first unclaimed backend range of
    the same collective that starts within or after it: its wait and its transfer.
    """
    ranges = trace.ranges
    if not len(ranges):
        return end
    work: dict[str, list[int]] = {}
    for i, n in enumerate(ranges["name"].tolist()):
        label = trace.strings[n]
        if label.startswith("gloo:"):
            work.setdefault(label[5:].replace("_", ""), []).append(i)
    for key in work:
        work[key].sort(key=lambda i: int(ranges["start"][i]))
    taken = {key: 0 for key in work}
    out = end.copy()
    for k, n in enumerate(names.tolist()):
        label = trace.strings[n]
        if not label.startswith("c10d::"):
            continue
        key = label[6:].rstrip("_").replace("_", "")
        queue = work.get(key, [])
        while taken.get(key, 0) < len(queue) and int(ranges["start"][queue[taken[key]]]) < int(start[k]):
            taken[key] += 1
        if taken.get(key, 0) < len(queue):
            out[k] = max(int(end[k]), int(ranges["end"][queue[taken[key]]]))
            taken[key] += 1
    return out


def cpu_run(trace: RankTrace) -> RankTrace | None:
    """The trace with its engine thread's outermost CPU ops as device ops; None when it has GPU
    activity or no CPU ops to stand in for it."""
    if len(trace.kernels) or len(trace.copies) or not len(trace.cpu_ops):
        return None
    ops = trace.cpu_ops
    tid = _engine_thread(trace)
    rows = np.flatnonzero(ops["tid"] == tid)
    top = rows[_outermost(ops["start"][rows], ops["end"][rows])]
    start = ops["start"][top]
    end = _collective_ends(trace, start, ops["end"][top], ops["name"][top])
    names, strings = _annotated_names(trace, tid, start, ops["name"][top].astype(np.int32))
    n = len(top)
    launch = len(strings)
    strings.append(LAUNCH_NAME)
    none = np.full(n, -1, dtype=np.int64)
    kernels = Table({
        "start": start, "end": end, "name": names.astype(np.int32), "device": np.zeros(n, np.int64),
        "stream": np.full(n, tid, np.int64), "correlation": np.arange(n, dtype=np.int64),
        "grid": none, "block": none, "registers": none, "shared_mem": none, "msg_bytes": np.zeros(n, np.int64),
    })
    runtime = Table({
        "start": start, "end": start.copy(), "name": np.full(n, launch, np.int32), "pid": np.zeros(n, np.int64),
        "tid": np.full(n, tid, np.int64), "correlation": np.arange(n, dtype=np.int64),
        "kind": np.full(n, RuntimeKind.other, np.int8),
    })
    note = f"CPU run: no CUDA activity; the {n} outermost CPU ops of thread {tid} are the device part, the gaps between them host time"
    return dataclasses.replace(trace, kernels=kernels, runtime=runtime, strings=strings, device_name=CPU_DEVICE,
                               device_sm_count=None, notes=[*trace.notes, note])


def host_parts(parts: dict[str, iv.IntervalSet]) -> dict[str, iv.IntervalSet]:
    """On the CPU nothing is launched ahead or queued: a gap between ops is the host's own time."""
    host = iv.union(iv.union(parts["host"], parts["launch"]), parts["queue"])
    return {**parts, "host": host, "launch": iv.EMPTY, "queue": iv.EMPTY}
