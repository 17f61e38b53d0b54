"""The critical-path budget of one step on one rank: elapsed time split into parts that do not overlap.

    host_blocking(trace) -> IntervalSet
    step_windows(ops, steps, most, on_host=False) -> [(lo, hi, tail_from) | None]            every step at once
    rank_sets(ops) -> RankSets
    budget_sets(ops, sets, host_block, lo, hi, tail_from) -> dict[part, IntervalSet]   many windows at once
    host_to_device(ops, sets, lo, hi) -> HostToDevice                                  per window

The window runs from the step's first device op to the next step's first device op (so the
gap between steps, where sampling and scheduling happen, belongs to the step that caused it);
the last step ends at the first device op launched after it, or at its own last device op
when the trace holds none. On a CPU run (``cpu_steps``) the "device" ops run on the thread that
marks the steps, so nothing lags the host: the window is the step's host window, from its mark
to the next step's, and the host time before a step's first op is that step's own.
Every instant of the window gets exactly one label,
in this order of precedence:

* ``device``: some compute/memory kernel or copy runs (D2H copies excepted, see ``host``);
* ``exposed_comm``: only communication runs;
* ``host``: a device-to-host copy runs, or the GPU is idle while the host sits in a blocking
  call (stream/device/event synchronize, synchronous memcpy), or the GPU is idle after the
  step's last op with the next launch not yet issued (CPU gap between steps);
* ``launch``: the GPU is idle inside the step and the next op's launch call has not returned
  yet: the host is the bottleneck;
* ``queue``: the GPU is idle although the next op was already launched: it waits on a
  dependency (another stream, an event, a peer), not on the host.

HTA's "launch delay" (kernel start minus launch-call end) mixes the last two; splitting them
is deliberate: more graph capture shrinks ``launch``, not ``queue``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnoser.trace import intervals as iv
from diagnoser.trace.model import RankTrace, RuntimeKind
from diagnoser.trace.ops import IS_KERNEL, DeviceOps
from diagnoser.trace.steps import Step, op_bounds, ops_of, step_batches

PARTS = ("device", "exposed_comm", "launch", "queue", "host")


def host_blocking(trace: RankTrace) -> iv.IntervalSet:
    """Host calls that block until the device catches up."""
    rt = trace.runtime
    if not len(rt):
        return iv.EMPTY
    names = np.array([not trace.strings[i].endswith("Async") for i in range(len(trace.strings))], dtype=bool)
    blocking = (rt["kind"] == RuntimeKind.sync) | ((rt["kind"] == RuntimeKind.memcpy) & names[rt["name"]])
    return iv.merge(rt["start"][blocking], rt["end"][blocking])


def step_windows(ops: DeviceOps, steps: list[Step], most: int, on_host: bool = False) -> list[tuple[int, int, int] | None]:
    """Each step's (lo, hi, tail_from), None for a step that launched no device work. Its first start
    and last end come a batch of steps (``step_batches``, of ``most`` steps) at a time, where a step at
    a time cost two numpy calls per step; the rest is a few integer comparisons per step."""
    first: list[int] = []
    last: list[int] = []
    for batch in step_batches([len(s.ops) for s in steps], most):
        rows, group = ops_of([steps[i] for i in batch])
        starts, ends = op_bounds(ops, rows, group, len(batch))
        first += starts.tolist()
        last += ends.tolist()
    out: list[tuple[int, int, int] | None] = []
    for i, step in enumerate(steps):
        after = steps[i + 1] if i + 1 < len(steps) else None
        if not len(step.ops):
            out.append(None)
        elif on_host:
            hi = after.host_start if after is not None else max(step.host_end, last[i])
            out.append((step.host_start, hi, min(last[i], hi)))
        else:
            following = (first[i + 1] if len(after.ops) else None) if after is not None else _first_launched_after(ops, step)
            hi = following if following is not None and following > first[i] else last[i]
            out.append((first[i], hi, min(last[i], hi)))
    return out


def _first_launched_after(ops: DeviceOps, step: Step) -> int | None:
    """Where the device work after the last step of a segmentation begins: the first op launched after
    its window (a step the trace ends inside, left out). Without it, the last step of a deeply queued
    trace would run on to the end of the queue's drain."""
    later = ops.start[ops.launch_start >= step.host_end]
    return int(later.min()) if len(later) else None


@dataclass(frozen=True)
class RankSets:
    """One rank's device time as merged sets, built once and clipped to each step's window."""

    compute: iv.IntervalSet  # kernels and copies, except communication and D2H copies
    d2h: iv.IntervalSet
    comm: iv.IntervalSet
    h2d: iv.IntervalSet  # inside ``compute``; kept apart to tell PCIe fetches from HBM work


def rank_sets(ops: DeviceOps) -> RankSets:
    compute = ~ops.is_comm & ~ops.is_d2h
    return RankSets(
        compute=iv.merge(ops.start[compute], ops.end[compute]),
        d2h=iv.merge(ops.start[ops.is_d2h], ops.end[ops.is_d2h]),
        comm=iv.merge(ops.start[ops.is_comm], ops.end[ops.is_comm]),
        h2d=iv.merge(ops.start[ops.is_h2d], ops.end[ops.is_h2d]),
    )


@dataclass(frozen=True)
class HostToDevice:
    """Host-to-device copies in each step window: inside the ``device`` part, but over PCIe, a
    link the HBM bound does not count (offloaded weights, swapped-in KV, pageable inputs)."""

    copy_ns: np.ndarray
    exposed_ns: np.ndarray  # no compute kernel runs meanwhile: the step waits on the link alone
    bytes: np.ndarray


def host_to_device(ops: DeviceOps, sets: RankSets, lo: np.ndarray, hi: np.ndarray) -> HostToDevice:
    """Per window [lo, hi), all windows at once: lengths by prefix sums over the rank's sets, bytes
    by prefix sums over the start-sorted ops (the copies that start in the window, when any copy
    time falls in it)."""
    starts, ends = sets.h2d
    if not len(starts):  # the usual decode trace: nothing comes from the host
        return HostToDevice(*(np.zeros(len(lo), np.int64) for _ in range(3)))
    touched = np.searchsorted(starts, hi, side="left") > np.searchsorted(ends, lo, side="right")
    rows = np.flatnonzero(ops.is_h2d)  # start-sorted, as all ops are
    moved = np.concatenate([[0], np.cumsum(ops.copy_bytes[rows])])
    first, last = np.searchsorted(ops.start[rows], lo, side="left"), np.searchsorted(ops.start[rows], hi, side="left")
    # compute kernels alone (no copies, no communication) where copies run: only such traces pay for the set
    kernel = ~ops.is_comm & (ops.source == IS_KERNEL) & (ops.start < ends[-1]) & (ops.end > starts[0])
    kernels = iv.merge(ops.start[kernel], ops.end[kernel])
    return HostToDevice(
        copy_ns=iv.covered_between(sets.h2d, lo, hi),
        exposed_ns=iv.covered_between(iv.subtract(sets.h2d, kernels), lo, hi),
        bytes=np.where(touched, moved[last] - moved[first], 0),
    )


def budget_sets(
    ops: DeviceOps, sets: RankSets, host_block: iv.IntervalSet, lo: np.ndarray, hi: np.ndarray, tail_from: np.ndarray
) -> dict[str, iv.IntervalSet]:
    """The budget of step windows [lo, hi) that do not overlap, all at once: each part, clipped to a
    window, is that window's part, as if it were computed alone (every rule below looks only
    inside the window). Set arithmetic over the whole rank once costs a few passes, where a
    window at a time costs a dozen numpy calls per step."""
    windows = iv.merge(lo[hi > lo], hi[hi > lo])  # abutting windows join: idle time is cut back at their bounds
    if not len(windows[0]):
        return {"device": sets.compute, **dict.fromkeys(PARTS[1:], iv.EMPTY)}
    span = (int(windows[0][0]), int(windows[1][-1]))  # the rank's sets are clipped to it before any arithmetic
    compute = iv.intersect(iv.clip(sets.compute, *span), windows)
    d2h = iv.subtract(iv.intersect(iv.clip(sets.d2h, *span), windows), compute)
    comm = iv.subtract(iv.subtract(iv.intersect(iv.clip(sets.comm, *span), windows), compute), d2h)
    busy = iv.union(iv.union(compute, d2h), comm)
    gap_start, gap_end = iv.cut(iv.subtract(windows, busy), np.concatenate([lo, hi]))

    nxt = np.searchsorted(ops.start, gap_end, side="left")  # the op whose start ends the gap
    has_next = nxt < len(ops)
    issued = np.where(has_next, ops.launch_end(np.minimum(nxt, len(ops) - 1)) if len(ops) else -1, gap_end)
    issued = np.where(issued < 0, gap_start, issued)  # no launch call recorded: treat as already issued
    issued = np.clip(issued, gap_start, gap_end)
    not_issued = iv.merge(gap_start[issued > gap_start], issued[issued > gap_start])
    waiting = iv.merge(issued[gap_end > issued], gap_end[gap_end > issued])

    tails = iv.merge(tail_from[hi > tail_from], hi[hi > tail_from])
    # the windows' own blocking calls: the whole rank's would make each step cost the trace's length
    host_idle = iv.union(iv.intersect(not_issued, iv.intersect(iv.clip(host_block, *span), windows)), iv.intersect(not_issued, tails))
    return {
        # clipped per window as it is, zero-length kernels and all; to the windows' span first, as every
        # part is: each window's length is then a pass over the span, not over the rank (10^7 intervals)
        "device": iv.clip(sets.compute, *span),
        "exposed_comm": comm,
        "launch": iv.subtract(not_issued, host_idle),
        "queue": waiting,
        "host": iv.union(host_idle, d2h),
    }
