"""Decode steps: which host window each piece of device work belongs to.

    segment_steps(trace, ops, step_range=None, steps_from="auto") -> Segmentation

A step is a host-side window (``ProfilerStep#N``, a named ``record_function``/NVTX range,
vLLM's per-step annotation (``engine_step``, see ``_engine_windows``),
or, when nothing is annotated, the interval between the first ``cudaGraphLaunch`` calls of
consecutive steps: one launch per step under full graphs, a fixed group of launches under
piecewise graphs or speculation, see ``graph_steps``; without graphs, the repeats of an eager
loop's kernel sequence, see ``step_pattern``).
Device work belongs to the step whose window contains the start of the host call that
launched it, so work that runs late (queued behind a deep stream) is still charged to the
step that asked for it. Windowing is explicit: work launched outside every window, or with no
launching call in the trace, is counted in ``Segmentation.unassigned`` rather than dropped.

A step whose name is vLLM's annotation ``execute_context_N(tokens)_generation_M(tokens)`` also
says what it held (``Step.kind``): a decode-only step is the loop a decode budget is about,
while a step that prefilled a prompt is slower by the prompt's length, not by any fault of it.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from diagnoser.errors import InputError
from diagnoser.trace import intervals as iv
from diagnoser.trace.graph_steps import graph_launches_per_step, replay_signature
from diagnoser.trace.model import RankTrace, RuntimeKind
from diagnoser.trace.ops import IS_KERNEL, DeviceOps
from diagnoser.trace.step_pattern import pattern_steps

_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
# N requests in prefill, M decoding; the token counts in parentheses are absent in some versions
# and carry more than the count in others (``execute_context_1(888_788544)_generation_0(0)``).
_ENGINE_STEP = re.compile(r"^execute_context_(\d+)(?:\((\d*)[^)]*\))?_generation_(\d+)(?:\((\d*)[^)]*\))?$")
# One annotation is the trace's only step: cutting at it would only drop the work around it.
MIN_ENGINE_STEPS = 2

StepKind = Literal["decode", "prefill", "mixed", "empty"]


def is_step_mark(name: str) -> bool:
    """Whether a host range marks a whole step rather than a part of the model."""
    return bool(_PROFILER_STEP.match(name) or _ENGINE_STEP.match(name))


def engine_step_kind(name: str) -> tuple[StepKind | None, int | None]:
    """(kind, prompt tokens prefilled) of a vLLM step annotation; (None, None) for any other name,
    and no tokens where the annotation does not count them."""
    found = _ENGINE_STEP.match(name)
    if found is None:
        return None, None
    prefill, decode = int(found[1]), int(found[3])
    kind: StepKind = "mixed" if prefill and decode else "prefill" if prefill else "decode" if decode else "empty"
    return kind, int(found[2]) if found[2] else None


def decode_tokens(name: str) -> tuple[int, int] | None:
    """(sequences decoding, tokens they fed) of a vLLM step annotation that only decoded and counts its tokens;
    more tokens than sequences is a step verifying speculative drafts (k + 1 tokens for k drafts)."""
    found = _ENGINE_STEP.match(name)
    if found is None or int(found[1]) or not int(found[3]) or not found[4]:
        return None
    return int(found[3]), int(found[4])


@dataclass
class Step:
    ordinal: int
    name: str
    host_start: int
    host_end: int
    ops: np.ndarray  # indices into DeviceOps launched inside the window
    kind: StepKind | None = None  # from a vLLM step annotation; None for other steps
    prefill_tokens: int | None = None  # prompt tokens the step prefilled, where the annotation says


def ops_of(steps: list[Step]) -> tuple[np.ndarray, np.ndarray]:
    """The ops of many steps end to end, and each one's step (its place in ``steps``): what the
    analyses of many steps at once take, so that their numpy calls are per batch of steps, not per step."""
    rows = np.concatenate([s.ops for s in steps]) if steps else np.zeros(0, np.int32)
    return rows, np.repeat(np.arange(len(steps), dtype=np.int32), [len(s.ops) for s in steps])


# A batch of steps analysed together holds at most this many ops (a step bigger than that alone), so
# the arrays of a batch stay a few MB however large the steps.
BATCH_OPS = 1 << 18


def step_batches(sizes: list[int], most: int) -> list[range]:
    """Runs of consecutive steps, of at most ``most`` steps and ``BATCH_OPS`` ops (``sizes``: each step's ops)."""
    batches, first, held = [], 0, 0
    for i, size in enumerate(sizes):
        if i > first and (i - first == most or held + size > BATCH_OPS):
            batches.append(range(first, i))
            first, held = i, 0
        held += size
    return [*batches, range(first, len(sizes))] if sizes else batches


def op_bounds(ops: DeviceOps, rows: np.ndarray, group: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Each step's first op start and last op end, 0 for a step without ops (``rows`` and ``group`` as
    ``ops_of`` gives them): a step's ops are ascending rows of start-sorted ops, so its first starts first."""
    last = iv.group_edge(group, iv.running_max_by_group(group, ops.end[rows]), groups, last=True)
    return iv.group_edge(group, ops.start[rows], groups), last


@dataclass
class Segmentation:
    method: str  # profiler_step | range | engine_step | graph_launch | kernel_pattern | whole_trace
    steps: list[Step]
    unassigned: int = 0  # device ops launched outside every window or with no launch call
    notes: list[str] = field(default_factory=list)


# What a forced ``steps_from`` needs, said when the trace lacks it.
STEPS_FROM = {
    "auto": "",
    "marks": "no ProfilerStep ranges in the trace",
    "graphs": "fewer than two CUDA graph launches in the trace",
    "pattern": "no kernel sequence that repeats, with a copy to the host, in three or more steps",
}


def _host_windows(
    trace: RankTrace, ops: DeviceOps, step_range: str | None, steps_from: str
) -> tuple[str, list[tuple[str, int, int]], list[str]]:
    """(method, windows, notes about how they were found). ``steps_from`` other than auto uses
    one source of steps only, to check an inferred cut against the marked one."""
    # Unasked, only step marks are read (``is_step_mark``): a reader may keep no other range. A named
    # range may be any: every range, read again where the reader left some out.
    ranges = trace.all_ranges() if step_range else trace.ranges
    names = [trace.strings[i] for i in ranges["name"]] if len(ranges) else []
    if step_range:
        picked = [i for i, n in enumerate(names) if step_range in n]
        if not picked:
            raise InputError(
                f"{trace.source}: no range named like {step_range!r} (use --step-range with a name in the trace)"
            )
        return "range", [(names[i], int(ranges["start"][i]), int(ranges["end"][i])) for i in picked], []
    profiler = [i for i, n in enumerate(names) if _PROFILER_STEP.match(n)]
    if profiler and steps_from in ("auto", "marks"):
        return "profiler_step", [(names[i], int(ranges["start"][i]), int(ranges["end"][i])) for i in profiler], []
    engine = np.array([i for i, n in enumerate(names) if _ENGINE_STEP.match(n)], dtype=np.int64)
    if len(engine) >= MIN_ENGINE_STEPS and steps_from in ("auto", "marks"):
        return "engine_step", _engine_windows(trace, ops, engine), []
    rt = trace.runtime
    graph = np.flatnonzero(rt["kind"] == RuntimeKind.graph_launch) if len(rt) else np.zeros(0, np.int64)
    if len(graph) >= 2 and steps_from in ("auto", "graphs"):
        graph = graph[np.argsort(rt["start"][graph], kind="stable")]
        launches = rt["start"][graph]
        pieces, offset = graph_launches_per_step(launches, replay_signature(trace, ops, graph))
        starts = launches[offset::pieces]
        last_end = int(max(rt["end"].max(), trace.kernels["end"].max() if len(trace.kernels) else 0))
        bounds = list(starts) + [last_end]
        if len(starts) > 1 and len(launches) - offset - (len(starts) - 1) * pieces < pieces:
            # the trace ends inside a step: the first launch of that partial step closes the last whole one
            starts, bounds = starts[:-1], list(starts)
        notes = [f"{pieces} graph launches per step, grouped by the gaps between them and what each replayed"] if pieces > 1 else []
        return "graph_launch", [(f"graph#{i}", int(bounds[i]), int(bounds[i + 1])) for i in range(len(starts))], notes
    everything = [t["start"] for t in (trace.kernels, trace.copies, trace.runtime) if len(t)]
    ends = [t["end"] for t in (trace.kernels, trace.copies, trace.runtime) if len(t)]
    if not everything:
        return "whole_trace", [], []  # the loader already refused a trace with no events
    last_end = int(max(a.max() for a in ends)) + 1
    pattern = _pattern_windows(trace, ops, last_end) if steps_from in ("auto", "pattern") else None
    if pattern is not None:
        return pattern
    if steps_from != "auto":
        raise InputError(f"{trace.source}: --steps-from {steps_from}: {STEPS_FROM[steps_from]}")
    return "whole_trace", [("whole trace", int(min(a.min() for a in everything)), last_end)], []


def _engine_windows(trace: RankTrace, ops: DeviceOps, rows: np.ndarray) -> list[tuple[str, int, int]]:
    """Windows from vLLM's step annotations. The annotation wraps the forward pass only: the
    step's sampling (``_C::greedy_argmax``) runs after it ends, so a step lasts until the next
    annotation starts, and the last one until the end of the work launched after it starts."""
    ranges = trace.ranges
    rows = rows[np.argsort(ranges["start"][rows], kind="stable")]
    starts = ranges["start"][rows]
    after_last = ops.end[ops.launch_start >= starts[-1]]
    last_end = max(int(ranges["end"][rows[-1]]), int(after_last.max()) if len(after_last) else 0)
    bounds = [*starts.tolist(), last_end]
    return [(trace.strings[ranges["name"][row]], bounds[i], bounds[i + 1]) for i, row in enumerate(rows.tolist())]


def _pattern_windows(trace: RankTrace, ops: DeviceOps, last_end: int) -> tuple[str, list[tuple[str, int, int]], list[str]] | None:
    """Steps of an unmarked eager loop, from its repeating kernel sequence (see ``graph_steps`` and ``step_pattern``)."""
    kernel = np.flatnonzero((ops.source == IS_KERNEL) & (ops.launch_start >= 0))
    kernel = kernel[np.argsort(ops.launch_start[kernel], kind="stable")]
    launches = ops.launch_start[kernel]
    d2h = np.sort(np.where(ops.launch_start >= 0, ops.launch_start, ops.start)[ops.is_d2h])
    found = pattern_steps(trace.kernels["name"][ops.row[kernel]], launches, d2h)
    if found is None:
        return None
    bounds = [int(launches[i]) for i in found.first]
    after = found.first[-1] + found.kernels_per_step
    bounds.append(int(launches[after]) if after < len(launches) else last_end)
    note = (
        f"steps inferred from a kernel sequence that repeats every {found.kernels_per_step} launches, each starting "
        "after the step's longest launch gap; mark steps (ProfilerStep, NVTX, --step-range) to be sure"
    )
    windows = [(f"pattern#{i}", bounds[i], bounds[i + 1]) for i in range(len(found.first))]
    return "kernel_pattern", windows, [note]


def _ops_by_window(slot: np.ndarray, inside: np.ndarray, windows: int) -> list[np.ndarray]:
    """The op indices of each window, ascending: one sort for all windows, where a mask per window
    would cost steps x ops (a 1 GB trace has 10^4 steps and 10^6 ops)."""
    rows = np.flatnonzero(inside).astype(np.int32)  # int32 as DeviceOps.row: the steps hold nearly every op between them
    rows = rows[np.argsort(slot[rows], kind="stable")]
    bounds = np.searchsorted(slot[rows], np.arange(windows + 1), side="left")
    return [rows[bounds[i] : bounds[i + 1]] for i in range(windows)]


def segment_steps(trace: RankTrace, ops: DeviceOps, step_range: str | None = None, steps_from: str = "auto") -> Segmentation:
    method, windows, notes = _host_windows(trace, ops, step_range, steps_from)
    windows.sort(key=lambda w: w[1])
    if method == "whole_trace":
        notes.append("no ProfilerStep, named range or repeated graph launch: the whole trace is one step")
    if method == "range" and len(windows) > 1:
        # nested or overlapping same-named ranges would charge one launch to two steps
        overlaps = sum(1 for a, b in itertools.pairwise(windows) if b[1] < a[2])
        if overlaps:
            notes.append(f"{overlaps} step windows overlap; a launch is charged to the earliest window holding it")
    launch = np.where(ops.launch_start >= 0, ops.launch_start, -1)
    if method == "whole_trace":
        launch = np.where(launch >= 0, launch, ops.start)  # nothing to window against: keep all work
    starts = np.array([w[1] for w in windows], dtype=np.int64)
    ends = np.array([w[2] for w in windows], dtype=np.int64)
    slot = np.searchsorted(starts, launch, side="right") - 1
    inside = (launch >= 0) & (slot >= 0)
    inside[inside] &= launch[inside] < ends[slot[inside]]
    steps = [
        Step(i, name, lo, hi, rows, *engine_step_kind(name))
        for i, ((name, lo, hi), rows) in enumerate(zip(windows, _ops_by_window(slot, inside, len(windows))))
    ]
    unassigned = int((~inside).sum())
    if unassigned:
        no_call = int((ops.launch_start < 0).sum())
        notes.append(
            f"{unassigned} device ops belong to no step ({no_call} with no launching call in the trace, "
            f"{unassigned - no_call} launched outside every step window); they still count in the budget's elapsed time"
        )
    return Segmentation(method=method, steps=steps, unassigned=unassigned, notes=notes)
