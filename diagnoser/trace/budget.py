"""The critical-path budget of one step on one rank: elapsed time split into parts that do not overlap.

    host_blocking(trace) -> IntervalSet
    step_window(ops, step, next_step, on_host=False) -> (lo, hi, tail_from) | None
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
from diagnoser.trace.steps import Step

PARTS = ("device", "exposed_comm", "launch", "queue", "host")


def host_blocking(trace: RankTrace) -> iv.IntervalSet:
    """Host calls that block until the device catches up."""
    rt = trace.runtime
    if not len(rt):
        return iv.EMPTY
    names = np.array([not trace.strings[i].endswith("Async") for i in range(len(trace.strings))], dtype=bool)
    blocking = (rt["kind"] == RuntimeKind.sync) | ((rt["kind"] == RuntimeKind.memcpy) & names[rt["name"]])
    return iv.merge(rt["start"][blocking], rt["end"][blocking])


def step_window(ops: DeviceOps, step: Step, next_step: Step | None, on_host: bool = False) -> tuple[int, int, int] | None:
    if not len(step.ops):
        return None
    last_end = int(ops.end[step.ops].max())
    if on_host:
        hi = next_step.host_start if next_step is not None else max(step.host_end, last_end)
        return step.host_start, hi, min(last_end, hi)
    lo = int(ops.start[step.ops].min())
    hi = last_end
    following = _following_start(ops, step, next_step)
    if following is not None and following > lo:
        hi = following
    return lo, hi, min(last_end, hi)


def _following_start(ops: DeviceOps, step: Step, next_step: Step | None) -> int | None:
    """Where the next step's device work begins. After the last step of a segmentation that is the
    first op launched after its window (a step the trace ends inside, left out): without it, the
    last step of a deeply queued trace would run on to the end of the queue's drain."""
    if next_step is not None:
        return int(ops.start[next_step.ops].min()) if len(next_step.ops) else None
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
        "device": sets.compute,  # clipped per window as it is, zero-length kernels and all
        "exposed_comm": comm,
        "launch": iv.subtract(not_issued, host_idle),
        "queue": waiting,
        "host": iv.union(host_idle, d2h),
    }
