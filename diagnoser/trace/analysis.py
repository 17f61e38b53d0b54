"""From ranks' traces to one analysis: steps, the per-rank budget, the critical rank, collectives.

    analyze_traces(traces, step_range=None, align="clock", steps_from="auto") -> Analysis

Format-agnostic: it takes ``RankTrace`` objects, whichever reader filled them. Ranks are put
on a common clock (each trace's ``clock_offset_ns``; with ``align="collective"`` corrected so
the first collective ends together on every rank, see ``ranks.py``); steps are matched across ranks by name
when names are unique (``ProfilerStep#551``), else by order. A synchronized step is limited by
its slowest rank: ranks that wait for a late peer show the wait as communication, so the
critical rank is the one with the most time outside exposed communication. The representative
step is the one whose critical-rank time is the median, among the decode-only steps where vLLM's
annotations tell them apart (``budget_steps``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from diagnoser.errors import InputError
from diagnoser.trace import intervals as iv
from diagnoser.trace.breakdown import temporal_breakdowns
from diagnoser.trace.budget import (
    PARTS,
    HostToDevice,
    RankSets,
    budget_sets,
    host_blocking,
    host_to_device,
    rank_sets,
    step_windows,
)
from diagnoser.trace.collector import without_cycle_collection
from diagnoser.trace.cpu_steps import cpu_run, host_parts, is_cpu_run
from diagnoser.trace.collectives import Arrival, match_collectives, rank_collectives
from diagnoser.trace.graphs import graph_replays, launch_starts
from diagnoser.trace.kernel_table import KernelClassRow, kernel_table
from diagnoser.trace.model import RankTrace
from diagnoser.trace.ops import IS_KERNEL, DeviceOps, device_ops
from diagnoser.trace.ranks import align_on_first_collective
from diagnoser.trace.steps import Segmentation, StepKind, ops_of, segment_steps, step_batches


class HtaView(BaseModel):
    """HTA's temporal breakdown of the step's own device work (for cross-checking, µs)."""

    span_us: float
    idle_us: float
    compute_us: float
    non_compute_us: float
    comm_comp_overlap: float | None = Field(description="fraction of communication time overlapped by compute")


class RankStep(BaseModel):
    rank: int
    step: str
    key: str
    window_start_ns: int = Field(description="on the common clock")
    window_ns: int
    parts_ns: dict[str, int] = Field(description="non-overlapping parts; they sum to window_ns")
    segments: dict[str, list[tuple[int, int]]] = Field(default_factory=dict, exclude=True, description="common clock")
    between_steps_ns: int | None = Field(
        description="GPU idle after the step's last op, before the next step's first (None: last step)"
    )
    kernels: int
    h2d_ns: int = Field(default=0, description="host-to-device copies in the window (inside the device part)")
    h2d_exposed_ns: int = Field(default=0, description="of those, time no compute kernel overlaps")
    h2d_bytes: int = Field(default=0, description="bytes the window's host-to-device copies moved")
    python_calls: int = Field(default=0, description="Python calls the profiler traced in the window (with_stack)")
    graph_status: str
    graph_launches: int
    kernel_launches: int
    graph_ops: int
    hta: HtaView
    kind: StepKind | None = Field(default=None, description="what a vLLM step held: decode, prefill, mixed or empty")
    prefill_tokens: int | None = Field(default=None, description="prompt tokens the step prefilled (vLLM annotation)")


class StepSummary(BaseModel):
    key: str
    ranks: list[int]
    critical_rank: int
    step_ms: float = Field(description="window of the critical rank")
    kind: StepKind | None = Field(default=None, description="what a vLLM step held: decode, prefill, mixed or empty")
    prefill_tokens: int | None = Field(default=None, description="prompt tokens the step prefilled (vLLM annotation)")


def budget_steps(steps: list[StepSummary]) -> list[StepSummary]:
    """The steps a budget speaks for: the decode-only ones where the trace tells steps apart (a
    prefill's time grows with its prompt, so mixing it in would move the median off the decode
    loop), else all of them."""
    return [s for s in steps if s.kind == "decode"] or steps


class CollectiveRow(BaseModel):
    step: str
    op: str
    implementation: str
    ordinal: int
    ranks: list[int]
    interval_us: float
    wait_us: float = Field(description="first to last arrival")
    transfer_us: float = Field(description="last arrival to median departure")
    late_rank: int
    late_rank_compute_us: float
    message_bytes: int | None = Field(default=None, description="larger of the input and output buffers")
    bandwidth_gbs: float | None = Field(
        default=None, description="algorithm bandwidth: message bytes / transfer time, 1e9 B/s"
    )


class Analysis(BaseModel):
    sources: list[str]
    ranks: list[int]
    method: str
    steps: list[StepSummary]
    rank_steps: list[RankStep]
    representative: str | None
    median_step_ms: float | None = Field(description="median of critical-rank step times over the budget's steps")
    step_spread_ms: float | None = Field(description="p90 - p10 of critical-rank step times over the budget's steps")
    decode_only: bool = Field(
        default=False, description="the budget's steps are the decode-only ones (vLLM annotations), not all"
    )
    kernel_table: list[KernelClassRow] = Field(description="critical rank, the budget's steps")
    copy_us: float = Field(
        default=0.0, description="critical rank, the budget's steps: copies and memsets in the device part (D2H is host time)"
    )
    collectives: list[CollectiveRow]
    kernel_sum_across_ranks_ms: float = Field(
        description="sum of kernel durations over ranks and steps: NOT elapsed time"
    )
    unassigned_ops: dict[int, int] = Field(description="per rank: device ops that belong to no step")
    notes: list[str]

    def budget_keys(self) -> set[str]:
        return {s.key for s in budget_steps(self.steps)}

    def budget(self, rank: int | None = None, key: str | None = None) -> RankStep | None:
        key = key or self.representative
        if rank is None:
            rank = next((s.critical_rank for s in self.steps if s.key == key), None)
        return next((r for r in self.rank_steps if r.key == key and r.rank == rank), None)


class KernelTable(BaseModel):
    rows: list[KernelClassRow]
    copy_us: float
    keys: list[str] = Field(description="the steps it is of")


class RankSummary(BaseModel):
    """One rank's share of an analysis, per step rather than per event: computed where the trace
    lives (one process per node), written out, and merged with the other ranks' summaries into the
    analysis of all the traces together (``merge_ranks``). ``analyze_traces`` goes the same way,
    so the two cannot drift apart."""

    source: str
    rank: int
    method: str
    notes: list[str] = Field(description="the reader's and the segmentation's, each naming the rank")
    keys: list[str] = Field(description="one per step of the segmentation")
    host_starts_ns: list[int] = Field(description="each step's host start on the common clock (aligns inferred steps)")
    empty_steps: list[str] = Field(description="keys of the steps that launched no device work")
    rank_steps: list[RankStep]
    segments: list[dict[str, list[tuple[int, int]]]] = Field(description="per rank step (RankStep leaves them out)")
    arrivals: list[list[Arrival]] = Field(description="per rank step: its collectives")
    kernel_sum_ms: float
    unassigned: int
    tables: dict[str, KernelTable] = Field(
        default_factory=dict, description="kernel tables a merge may need: of the decode-only steps and of all"
    )

    def rename(self, keys: dict[str, str]) -> None:
        self.keys = [keys[k] for k in self.keys]
        self.empty_steps = [keys[k] for k in self.empty_steps]
        for row in self.rank_steps:
            row.key = keys[row.key]


def device_copy_us(ops: DeviceOps, steps: list) -> float:
    """Copy and memset time in the steps' device part: the kernel table's classes are shares of
    kernels plus these, so a step spent fetching over PCIe does not inflate every kernel class."""
    if not steps:
        return 0.0
    rows = np.concatenate([s.ops for s in steps])
    rows = rows[(ops.source[rows] != IS_KERNEL) & ~ops.is_d2h[rows]]
    return float((ops.end[rows] - ops.start[rows]).sum()) / 1000.0


def _keys(seg: Segmentation) -> list[str]:
    names = [s.name for s in seg.steps]
    return names if len(set(names)) == len(names) else [f"#{s.ordinal}" for s in seg.steps]


# Steps found from graph launches or a kernel pattern are numbered per rank, from each rank's
# first whole step; those numbers need not name the same step on every rank.
INFERRED = ("graph_launch", "kernel_pattern")


def align_inferred_keys(summaries: list[RankSummary]) -> list[str]:
    """Give each inferred step the key of the reference rank's step that starts nearest it on the
    common clock, so collectives and budgets compare the same step across ranks.

    Synchronised ranks start a step within a fraction of it; a window more than half a step from
    every reference step keeps a key of its own (``@rank``), and so does the farther of two
    windows that land on one reference step. Renames the keys in the summaries; returns notes on
    what could not be matched.
    """
    inferred = [s for s in summaries if s.method in INFERRED and s.keys]
    if len(inferred) < 2:
        return []
    ref = max(inferred, key=lambda s: (len(s.keys), -s.rank))
    ref_starts = np.array(ref.host_starts_ns)
    half = float(np.median(np.diff(ref_starts))) / 2 if len(ref_starts) > 1 else float("inf")
    notes = []
    for summary in inferred:
        if summary is ref:
            continue
        starts = np.array(summary.host_starts_ns)
        after = np.searchsorted(ref_starts, starts)  # the reference steps on either side of each start
        left, right = np.clip(after - 1, 0, len(ref_starts) - 1), np.clip(after, 0, len(ref_starts) - 1)
        nearest = np.where(np.abs(starts - ref_starts[left]) <= np.abs(starts - ref_starts[right]), left, right)
        distance = np.abs(starts - ref_starts[nearest])
        best: dict[int, int] = {}
        for i in np.argsort(distance, kind="stable"):
            if distance[i] <= half and int(nearest[i]) not in best:
                best[int(nearest[i])] = int(i)
        matched = {i: ref.keys[r] for r, i in best.items()}
        summary.rename({key: matched.get(i, f"{key}@rank{summary.rank}") for i, key in enumerate(summary.keys)})
        if len(matched) < len(summary.keys):
            notes.append(f"rank {summary.rank}: {len(summary.keys) - len(matched)} inferred steps match no step of rank {ref.rank}")
    return notes


# Windows budgeted together: the numpy calls per batch are spread over this many steps, and the set
# arithmetic holds a few times this many steps' intervals, not the whole rank's.
BUDGET_BATCH = 1024


@dataclass
class _Budgets:
    """The budgets of one rank's working steps, computed together (``budget_sets``)."""

    parts_ns: np.ndarray  # [window, part], parts in PARTS order
    between_ns: np.ndarray  # per window: launch, queue and host time after its last op
    segments: list[dict[str, list[tuple[int, int]]]]  # per window, on the common clock; empty dicts unless kept


def _budgets(
    trace: RankTrace, ops: DeviceOps, sets: RankSets, blocking: iv.IntervalSet, windows: np.ndarray, keep_segments: bool
) -> _Budgets:
    """Windows ([lo, hi, tail_from] rows) that do not overlap in batches of ``BUDGET_BATCH``, as steps
    in order are; any window that overlaps another, or is empty, alone. Each gets what it would get
    alone."""
    lo, hi, tail = windows.T
    order = np.argsort(lo, kind="stable")
    order = order[hi[order] > lo[order]]
    disjoint = bool(np.all(lo[order][1:] >= hi[order][:-1]))
    batches = [order[i : i + BUDGET_BATCH] for i in range(0, len(order), BUDGET_BATCH)] if disjoint else []
    batched = np.zeros(len(lo), dtype=bool)
    batched[order if disjoint else []] = True
    groups = batches + [np.array([i]) for i in np.flatnonzero(~batched)]
    out = _Budgets(np.zeros((len(lo), len(PARTS)), np.int64), np.zeros(len(lo), np.int64), [{} for _ in lo])
    for group in groups:
        parts = budget_sets(ops, sets, blocking, lo[group], hi[group], tail[group])
        if is_cpu_run(trace):
            parts = host_parts(parts)
        for j, part in enumerate(PARTS):
            out.parts_ns[group, j] = iv.covered_between(parts[part], lo[group], hi[group])
        out.between_ns[group] = sum(iv.covered_between(parts[p], tail[group], hi[group]) for p in ("launch", "queue", "host"))
        for w in group.tolist() if keep_segments else ():
            clipped = {p: iv.clip(parts[p], int(lo[w]), int(hi[w])) for p in PARTS}
            offset = trace.clock_offset_ns
            out.segments[w] = {p: list(zip((c[0] + offset).tolist(), (c[1] + offset).tolist())) for p, c in clipped.items()}
    return out


def _rank_steps(
    trace: RankTrace,
    ops: DeviceOps,
    seg: Segmentation,
    worked: list[int],
    keys: list[str],
    windows: np.ndarray,
    budgets: _Budgets,
    h2d: HostToDevice,
    compute: iv.IntervalSet,
) -> tuple[list[RankStep], list[list[Arrival]]]:
    """The rows and collectives of the steps that did device work (``worked``; step ``worked[w]``'s
    window is number ``w`` of ``windows`` and of the budgets), a batch of steps at a time."""
    launches = launch_starts(trace)
    lo, hi, _ = windows.T
    python_calls = (np.searchsorted(trace.python_calls, hi) - np.searchsorted(trace.python_calls, lo)).tolist()
    rank_steps, arrivals = [], []
    for batch in step_batches([len(seg.steps[i].ops) for i in worked], BUDGET_BATCH):
        steps = [seg.steps[worked[w]] for w in batch]
        rows, group = ops_of(steps)
        hta = temporal_breakdowns(ops, rows, group, len(steps))
        host = np.array([(s.host_start, s.host_end) for s in steps], np.int64)
        replays = graph_replays(launches, ops, rows, group, host[:, 0], host[:, 1])
        kernels = iv.group_sums(group, ops.source[rows] == IS_KERNEL, len(steps)).tolist()
        arrivals += rank_collectives(trace, ops, rows, group, len(steps), compute)
        for j, (w, step, replay) in enumerate(zip(batch, steps, replays)):
            i = worked[w]
            has_next = i + 1 < len(seg.steps) and len(seg.steps[i + 1].ops) > 0
            rank_steps.append(
                RankStep(
                    rank=trace.rank,
                    step=step.name,
                    key=keys[i],
                    window_start_ns=int(lo[w]) + trace.clock_offset_ns,
                    window_ns=int(hi[w] - lo[w]),
                    parts_ns=dict(zip(PARTS, budgets.parts_ns[w].tolist())),
                    between_steps_ns=int(budgets.between_ns[w]) if has_next else None,
                    segments=budgets.segments[w],
                    kernels=kernels[j],
                    h2d_ns=int(h2d.copy_ns[w]),
                    h2d_exposed_ns=int(h2d.exposed_ns[w]),
                    h2d_bytes=int(h2d.bytes[w]),
                    python_calls=python_calls[w],
                    graph_status=replay.status.value,
                    graph_launches=replay.graph_launches,
                    kernel_launches=replay.kernel_launches,
                    graph_ops=replay.graph_ops,
                    kind=step.kind,
                    prefill_tokens=step.prefill_tokens,
                    hta=HtaView(
                        span_us=hta.span_ns[j] / 1000,
                        idle_us=hta.idle_ns[j] / 1000,
                        compute_us=hta.compute_ns[j] / 1000,
                        non_compute_us=hta.non_compute_ns[j] / 1000,
                        comm_comp_overlap=hta.comm_comp_overlap[j],
                    ),
                )
            )
    return rank_steps, arrivals


def _segmented(traces: list[RankTrace], step_range: str | None, align: str, steps_from: str):
    """(notes, [(trace, ops, segmentation)]): each rank on the common clock, cut into steps."""
    traces = [cpu_run(t) or t for t in traces]
    if not any(len(t.kernels) or len(t.copies) for t in traces):
        raise InputError(
            f"{', '.join(t.source for t in traces)}: no GPU kernels or copies in the trace "
            "(record CUDA activity: torch.profiler with ProfilerActivity.CUDA, or nsys -t cuda)"
        )
    notes: list[str] = []
    all_ops = [device_ops(trace) for trace in traces]
    if align == "collective" and len(traces) > 1:
        notes += align_on_first_collective(traces, all_ops)
    return notes, [(t, ops, segment_steps(t, ops, step_range, steps_from)) for t, ops in zip(traces, all_ops)]


def rank_summary(trace: RankTrace, ops: DeviceOps, seg: Segmentation, keep_segments: bool = True) -> RankSummary:
    """``keep_segments``: keep each step's labelled intervals (the budget trace, ``--perfetto``): about
    a hundred bytes per interval, so per event, where the rest of a summary is per step."""
    keys = _keys(seg)
    sets = rank_sets(ops)
    found = step_windows(ops, seg.steps, BUDGET_BATCH, on_host=is_cpu_run(trace))
    worked = [i for i, window in enumerate(found) if window is not None]
    windows = np.array([found[i] for i in worked], dtype=np.int64).reshape(-1, 3)
    budgets = _budgets(trace, ops, sets, host_blocking(trace), windows, keep_segments)
    h2d = host_to_device(ops, sets, windows[:, 0], windows[:, 1])
    rank_steps, arrivals = _rank_steps(trace, ops, seg, worked, keys, windows, budgets, h2d, sets.compute)
    empty = [key for key, window in zip(keys, found) if window is None]
    return RankSummary(
        source=trace.source,
        rank=trace.rank,
        method=seg.method,
        notes=[f"rank {trace.rank}: {n}" for n in trace.notes + seg.notes],
        keys=keys,
        host_starts_ns=[st.host_start + trace.clock_offset_ns for st in seg.steps],
        empty_steps=empty,
        rank_steps=rank_steps,
        segments=[row.segments for row in rank_steps],
        arrivals=arrivals,
        kernel_sum_ms=float((trace.kernels["end"] - trace.kernels["start"]).sum()) / 1e6 if len(trace.kernels) else 0.0,
        unassigned=seg.unassigned,
    )


def _table(trace: RankTrace, ops: DeviceOps, seg: Segmentation, keys: list[str], wanted: set[str]) -> KernelTable:
    steps = [step for step, key in zip(seg.steps, keys) if key in wanted]
    return KernelTable(rows=kernel_table(trace, ops, steps), copy_us=device_copy_us(ops, steps), keys=[k for k in keys if k in wanted])


def summarize_traces(
    traces: list[RankTrace], step_range: str | None = None, align: str = "clock", steps_from: str = "auto"
) -> list[RankSummary]:
    """Each rank's summary, with the kernel tables a merge may need (of its decode-only steps, and of all)."""
    notes, segmented = _segmented(traces, step_range, align, steps_from)
    summaries = []
    for trace, ops, seg in segmented:
        summary = rank_summary(trace, ops, seg)
        worked = {row.key for row in summary.rank_steps}
        decode = {row.key for row in summary.rank_steps if row.kind == "decode"}
        summary.tables = {"all": _table(trace, ops, seg, summary.keys, worked)}
        if decode:
            summary.tables["decode"] = _table(trace, ops, seg, summary.keys, decode)
        summaries.append(summary)
    summaries[0].notes[:0] = notes
    return summaries


@without_cycle_collection
def analyze_traces(
    traces: list[RankTrace], step_range: str | None = None, align: str = "clock", steps_from: str = "auto",
    keep_segments: bool = True,
) -> Analysis:
    """``keep_segments=False`` leaves out the budget's intervals, which only a budget trace draws
    (``rank_summary``): memory then grows with the steps, not the events."""
    notes, segmented = _segmented(traces, step_range, align, steps_from)
    summaries = [rank_summary(trace, ops, seg, keep_segments) for trace, ops, seg in segmented]
    by_rank = {id(summary): item for summary, item in zip(summaries, segmented)}

    def table_of(summary: RankSummary, wanted: set[str]) -> tuple[KernelTable, list[str]]:
        trace, ops, seg = by_rank[id(summary)]
        return _table(trace, ops, seg, summary.keys, wanted), []

    return merge_ranks(summaries, table_of, notes)


def _stored_table(summary: RankSummary, wanted: set[str]) -> tuple[KernelTable, list[str]]:
    """The kernel table a summary carries for the budget's steps: of its decode-only ones or of all."""
    decode = summary.tables.get("decode")
    table = decode if decode is not None and set(decode.keys) <= wanted else summary.tables.get("all")
    if table is None:
        return KernelTable(rows=[], copy_us=0.0, keys=[]), [f"rank {summary.rank}: its summary holds no kernel table"]
    mine = {k for k in summary.keys if k in wanted}
    if set(table.keys) == mine:
        return table, []
    return table, [
        f"rank {summary.rank}: kernel table of {len(table.keys)} of its steps, the budget's are {len(mine)} "
        "(the ranks disagree on which steps are decode-only, or the rank did no work in some)"
    ]


TableOf = Callable[[RankSummary, set[str]], tuple[KernelTable, list[str]]]


def merge_ranks(
    summaries: list[RankSummary], table_of: TableOf = _stored_table, leading_notes: Sequence[str] = ()
) -> Analysis:
    """One analysis from the ranks' summaries, as if their traces had been analysed together.
    ``table_of`` gives the critical rank's kernel table of the budget's steps: from the summary, or
    computed from the trace when it is at hand (``analyze_traces``)."""
    ranks = [s.rank for s in summaries]
    repeated = next((r for r in ranks if ranks.count(r) > 1), None)
    if repeated is not None:
        raise InputError(f"rank {repeated} appears in more than one summary")
    notes = [*leading_notes, *(n for s in summaries for n in s.notes)]
    notes += align_inferred_keys(summaries)
    methods = {s.method for s in summaries}
    if len(methods) > 1:
        notes.append(f"ranks were segmented differently ({', '.join(sorted(methods))})")
    notes += [f"rank {s.rank}: step {key} launched no device work; no budget" for s in summaries for key in s.empty_steps]

    rank_steps: list[RankStep] = []
    arrivals: dict[str, list] = {}
    for summary in summaries:
        for row, segments, arrived in zip(summary.rank_steps, summary.segments, summary.arrivals):
            row.segments = segments
            rank_steps.append(row)
            arrivals.setdefault(row.key, []).append(arrived)

    by_key: dict[str, list[RankStep]] = {}
    for r in rank_steps:
        by_key.setdefault(r.key, []).append(r)
    steps = []
    for key, rows in by_key.items():
        critical = max(rows, key=lambda r: (r.window_ns - r.parts_ns["exposed_comm"], r.window_ns))
        steps.append(
            StepSummary(
                key=key,
                ranks=[r.rank for r in rows],
                critical_rank=critical.rank,
                step_ms=critical.window_ns / 1e6,
                kind=critical.kind,
                prefill_tokens=critical.prefill_tokens,
            )
        )

    budgeted = budget_steps(steps)
    decode_only = any(s.kind == "decode" for s in steps)
    kinds = Counter(s.kind for s in steps if s.kind is not None)
    if kinds and not decode_only:
        held = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        notes.append(f"no decode-only step: the budget, median and kernel table are of all {len(steps)} steps ({held})")
    times = np.array([s.step_ms for s in budgeted])
    representative = None
    if len(times):
        representative = budgeted[int(np.argsort(times, kind="stable")[(len(times) - 1) // 2])].key
    collectives = [
        CollectiveRow(
            step=key,
            op=c.op,
            implementation=c.implementation,
            ordinal=c.ordinal,
            ranks=list(c.ranks),
            interval_us=c.interval_ns / 1000,
            wait_us=c.wait_ns / 1000,
            transfer_us=c.transfer_ns / 1000,
            late_rank=c.late_rank,
            late_rank_compute_us=c.late_rank_compute_ns / 1000,
            message_bytes=c.message_bytes,
            bandwidth_gbs=c.bandwidth_gbs,
        )
        for key, per in arrivals.items()
        for c in match_collectives(per)
    ]
    critical_rank = next((s.critical_rank for s in steps if s.key == representative), None)
    table = KernelTable(rows=[], copy_us=0.0, keys=[])
    budget_keys = {s.key for s in budgeted}
    for summary in summaries:
        if summary.rank == critical_rank:
            table, table_notes = table_of(summary, budget_keys)
            notes += table_notes
    return Analysis(
        sources=[s.source for s in summaries],
        ranks=ranks,
        method="/".join(sorted(methods)),
        steps=steps,
        rank_steps=rank_steps,
        representative=representative,
        median_step_ms=float(np.median(times)) if len(times) else None,
        step_spread_ms=float(np.percentile(times, 90) - np.percentile(times, 10)) if len(times) else None,
        decode_only=decode_only,
        kernel_table=table.rows,
        copy_us=table.copy_us,
        collectives=collectives,
        kernel_sum_across_ranks_ms=sum(s.kernel_sum_ms for s in summaries),
        unassigned_ops={s.rank: s.unassigned for s in summaries},
        notes=notes,
    )
