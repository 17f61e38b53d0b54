"""An ``Analysis`` as the observation facts the rule base reasons over.

    to_observations(analysis) -> Observations

Only the fields traces can establish are filled; the rest stay None so a rule that needs
them asks for the right check. Kernel time summed over ranks goes to its own, explicitly
labelled field: it is not elapsed time and must never be compared with a step. Where vLLM's
annotations tell decode-only steps from steps that prefilled, the per-step facts are of the
decode-only ones (the loop a decode budget explains) and the others are counted in ``step_mix``.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from diagnoser.models.observations import (
    CollectiveObs,
    GraphReplayObs,
    GraphStatus,
    HostObs,
    KernelClassObs,
    Observations,
    StepBudget,
    SpeculationObs,
    StepMixObs,
)
from diagnoser.trace.analysis import Analysis, CollectiveRow, RankStep
from diagnoser.trace.steps import decode_tokens


def step_budget(row: RankStep, spread_ms: float | None = None, segmentation: str | None = None) -> StepBudget:
    ms = {part: ns / 1e6 for part, ns in row.parts_ns.items()}
    return StepBudget(
        rank=row.rank,
        step_ms=row.window_ns / 1e6,
        device_ms=ms["device"],
        exposed_comm_ms=ms["exposed_comm"],
        launch_ms=ms["launch"],
        queue_ms=ms["queue"],
        host_ms=ms["host"],
        source=f"diagnoser analyze, step {row.step}",
        step_spread_ms=spread_ms,
        h2d_ms=row.h2d_ns / 1e6,
        h2d_exposed_ms=row.h2d_exposed_ns / 1e6,
        h2d_bytes=row.h2d_bytes,
        python_calls=row.python_calls,
        segmentation=segmentation,
    )


def _graph(critical: RankStep, rows: list[RankStep]) -> GraphReplayObs:
    """Over the critical rank's budgeted steps: vLLM replays graphs for decode-only steps and runs
    a prefill piecewise or eagerly, which is no partial capture of the decode loop."""
    statuses = {r.graph_status for r in rows}
    status = GraphStatus(critical.graph_status) if len(statuses) == 1 else GraphStatus.partial
    return GraphReplayObs(
        status=status,
        kernel_launches_per_step=float(np.mean([r.kernel_launches for r in rows])),
        graph_launches_per_step=float(np.mean([r.graph_launches for r in rows])),
    )


def _median_per_step(calls: list[CollectiveRow], field: str) -> float:
    """Median over steps of the per-step sum, in ms."""
    per_step: dict[str, float] = {}
    for c in calls:
        per_step[c.step] = per_step.get(c.step, 0.0) + getattr(c, field)
    return float(np.median(list(per_step.values()))) / 1000


def _median_known(calls: list[CollectiveRow], field: str) -> float | None:
    """Median over the calls that have the value, None when none has it."""
    known = [v for c in calls if (v := getattr(c, field)) is not None]
    return float(np.median(known)) if known else None


def _collectives(analysis: Analysis) -> list[CollectiveObs]:
    """Per (op, implementation); with one rank the transfer can't be told from the wait for
    unseen peers, so neither it nor its bandwidth is reported."""
    out = []
    for op, impl in sorted({(c.op, c.implementation) for c in analysis.collectives}):
        calls = [c for c in analysis.collectives if (c.op, c.implementation) == (op, impl)]
        group = max(len(c.ranks) for c in calls)
        multi = group > 1  # with one rank there is no arrival skew to measure
        late = Counter(c.late_rank for c in calls if c.wait_us > 0).most_common(1)
        out.append(
            CollectiveObs(
                op=op,
                implementation=impl,
                calls_per_step=len(calls) / len({c.step for c in calls}),
                interval_ms=_median_per_step(calls, "interval_us"),
                transfer_ms=_median_per_step(calls, "transfer_us") if multi else None,
                wait_ms=_median_per_step(calls, "wait_us") if multi else None,
                late_rank=late[0][0] if multi and late else None,
                group_size=group if multi else None,
                preceding_compute_ms=_median_per_step(calls, "late_rank_compute_us") if multi else None,
                message_bytes=_median_known(calls, "message_bytes"),
                effective_bandwidth_gbs=_median_known(calls, "bandwidth_gbs") if multi else None,
            )
        )
    return out


def _kernel_classes(analysis: Analysis) -> list[KernelClassObs]:
    """One fact per class; implementations of a class (nccl, symm_mem) are merged. Shares are of
    all device work, copies included, so that device_ms x share is the class's time."""
    device_total = sum(r.total_us for r in analysis.kernel_table) + analysis.copy_us or 1.0
    classes: dict[str, KernelClassObs] = {}
    for row in analysis.kernel_table:
        share = row.total_us / device_total
        prev = classes.get(row.kernel_class)
        if prev is None:
            classes[row.kernel_class] = KernelClassObs(
                kernel_class=row.kernel_class,
                share_of_step=min(share, 1.0),
                count_per_step=row.count_per_step,
                median_us=row.median_us,
                grid_ctas=row.median_grid_ctas,
                sm_count=row.sm_count,
                achieved_bw_fraction=row.bw_fraction,
                achieved_flops_fraction=row.flops_fraction,
            )
        else:
            prev.share_of_step = min(prev.share_of_step + share, 1.0)
            prev.count_per_step = (prev.count_per_step or 0) + row.count_per_step
    return list(classes.values())


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _step_mix(analysis: Analysis, critical: RankStep) -> StepMixObs | None:
    """Steps by what they held, where vLLM's annotations say it (None elsewhere)."""
    kinds = [s for s in analysis.steps if s.kind is not None]
    if not kinds:
        return None
    mixed = [s for s in kinds if s.kind == "mixed"]
    return StepMixObs(
        decode_steps=sum(s.kind == "decode" for s in kinds),
        prefill_steps=sum(s.kind == "prefill" for s in kinds),
        mixed_steps=len(mixed),
        decode_step_ms=_median([s.step_ms for s in kinds if s.kind == "decode"]),
        mixed_step_ms=_median([s.step_ms for s in mixed]),
        prefill_step_ms=_median([s.step_ms for s in kinds if s.kind == "prefill"]),
        longest_prefill_step_ms=max((s.step_ms for s in kinds if s.kind != "decode"), default=None),
        longest_prefill_tokens=max((s.prefill_tokens for s in kinds if s.prefill_tokens is not None), default=None),
        prefill_tokens_per_mixed_step=_median([s.prefill_tokens for s in mixed if s.prefill_tokens is not None]),
        source=f"diagnoser analyze, {analysis.sources[analysis.ranks.index(critical.rank)]}",
    )


# Steps of each kind needed before their medians are compared: fewer is one request's luck.
MIN_STEPS_EACH = 3


def _speculation(rows: list[RankStep]) -> SpeculationObs | None:
    """A trace holding decode steps that verified drafts and decode steps that did not, at the same number of
    sequences: the plain step is the ordinary step speculation is weighed against (it still pays the drafter's
    own lookup, so it bounds the loss from below), the other the verify cycle. All of that batch's steps together
    give the share that verified and the drafted tokens each sequence fed per step, so the time per emitted token
    comes from the same window and the same medians as the ordinary step once the counters say how many drafts
    are accepted."""
    by_batch: dict[int, tuple[list[float], list[float], list[int]]] = {}
    for r in rows:
        counts = decode_tokens(r.step)
        if counts is None:
            continue
        plain, verify, drafted = by_batch.setdefault(counts[0], ([], [], []))
        (verify if counts[1] > counts[0] else plain).append(r.window_ns / 1e6)
        drafted.append(counts[1] - counts[0])
    usable = [(n, *steps) for n, steps in by_batch.items() if min(len(steps[0]), len(steps[1])) >= MIN_STEPS_EACH]
    if not usable:
        return None
    n, plain, verify, drafted = max(usable, key=lambda found: len(found[3]))
    return SpeculationObs(ordinary_step_ms=_median(plain), verify_ms=_median(verify),
                          verify_step_share=len(verify) / len(drafted), drafted_per_sequence_step=sum(drafted) / (n * len(drafted)))


def to_observations(analysis: Analysis) -> Observations:
    critical = analysis.budget()
    if critical is None:
        return Observations(kernel_sum_across_ranks_ms=analysis.kernel_sum_across_ranks_ms)
    same_step = [r for r in analysis.rank_steps if r.key == critical.key]
    budgeted = analysis.budget_keys()
    rows = [r for r in analysis.rank_steps if r.rank == critical.rank and r.key in budgeted]
    gaps = [r.between_steps_ns / 1e6 for r in rows if r.between_steps_ns is not None]
    return Observations(
        budget=step_budget(critical, analysis.step_spread_ms, analysis.method),
        rank_budgets=[step_budget(r) for r in same_step],
        kernel_classes=_kernel_classes(analysis),
        graph=_graph(critical, rows),
        collectives=_collectives(analysis),
        host=HostObs(gap_between_steps_ms=_median(gaps)) if gaps else None,
        step_mix=_step_mix(analysis, critical),
        speculation=_speculation(rows),
        kernel_sum_across_ranks_ms=analysis.kernel_sum_across_ranks_ms,
    )
