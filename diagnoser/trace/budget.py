"""The critical-path budget of one step on one rank: elapsed time split into parts that do not overlap.

    host_blocking(trace) -> IntervalSet
    step_window(ops, step, next_step, on_host=False) -> (lo, hi, tail_from) | None
    rank_sets(ops) -> RankSets
    budget_parts(ops, sets, host_block, lo, hi, tail_from) -> dict[part, IntervalSet]
    host_to_device(ops, sets, lo, hi) -> HostToDevice

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
    kernels: iv.IntervalSet  # compute kernels alone (no copies, no communication)


def rank_sets(ops: DeviceOps) -> RankSets:
    compute = ~ops.is_comm & ~ops.is_d2h
    kernels = compute & (ops.source == IS_KERNEL)
    return RankSets(
        compute=iv.merge(ops.start[compute], ops.end[compute]),
        d2h=iv.merge(ops.start[ops.is_d2h], ops.end[ops.is_d2h]),
        comm=iv.merge(ops.start[ops.is_comm], ops.end[ops.is_comm]),
        h2d=iv.merge(ops.start[ops.is_h2d], ops.end[ops.is_h2d]),
        kernels=iv.merge(ops.start[kernels], ops.end[kernels]),
    )


@dataclass(frozen=True)
class HostToDevice:
    """Host-to-device copies in one step window: inside the ``device`` part, but over PCIe,
    a link the HBM bound does not count (offloaded weights, swapped-in KV, pageable inputs)."""

    copy_ns: int
    exposed_ns: int  # no compute kernel runs meanwhile: the step waits on the link alone
    bytes: int


def host_to_device(ops: DeviceOps, sets: RankSets, lo: int, hi: int) -> HostToDevice:
    copies = iv.clip(sets.h2d, lo, hi)
    if not len(copies[0]):  # the usual decode step: nothing comes from the host
        return HostToDevice(0, 0, 0)
    first, last = np.searchsorted(ops.start, [lo, hi], side="left")  # ops are start-sorted: no full scan per step
    window = slice(int(first), int(last))
    return HostToDevice(
        copy_ns=iv.total(copies),
        exposed_ns=iv.total(iv.subtract(copies, iv.clip(sets.kernels, lo, hi))),
        bytes=int(ops.copy_bytes[window][ops.is_h2d[window]].sum()),
    )


def budget_parts(
    ops: DeviceOps, sets: RankSets, host_block: iv.IntervalSet, lo: int, hi: int, tail_from: int
) -> dict[str, iv.IntervalSet]:
    compute = iv.clip(sets.compute, lo, hi)
    d2h = iv.subtract(iv.clip(sets.d2h, lo, hi), compute)
    comm = iv.subtract(iv.subtract(iv.clip(sets.comm, lo, hi), compute), d2h)
    busy = iv.union(iv.union(compute, d2h), comm)
    idle = iv.subtract((np.array([lo], np.int64), np.array([hi], np.int64)), busy)

    gap_start, gap_end = idle
    nxt = np.searchsorted(ops.start, gap_end, side="left")  # the op whose start ends the gap
    has_next = nxt < len(ops)
    issued = np.where(has_next, ops.launch_end[np.minimum(nxt, len(ops) - 1)] if len(ops) else -1, gap_end)
    issued = np.where(issued < 0, gap_start, issued)  # no launch call recorded: treat as already issued
    issued = np.clip(issued, gap_start, gap_end)
    not_issued = iv.merge(gap_start[issued > gap_start], issued[issued > gap_start])
    waiting = iv.merge(issued[gap_end > issued], gap_end[gap_end > issued])

    tail = (np.array([tail_from], np.int64), np.array([max(hi, tail_from)], np.int64))
    # the window's own blocking calls: the whole rank's would make each step cost the trace's length
    host_idle = iv.union(iv.intersect(not_issued, iv.clip(host_block, lo, hi)), iv.intersect(not_issued, tail))
    return {
        "device": compute,
        "exposed_comm": comm,
        "launch": iv.subtract(not_issued, host_idle),
        "queue": waiting,
        "host": iv.union(host_idle, d2h),
    }
