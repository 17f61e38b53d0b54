"""What changed between two analyses of the same workload (before and after a fix).

    compare_analyses(before, after) -> Comparison

A fix is judged by where the time went, not by one total: a step that got 10% shorter
because kernels got faster while launch gaps grew tells a different story from one where
the gaps closed. So the comparison is per rank and per budget part of the representative
step, per kernel class, and for collectives' wait and transfer, and the headline lists the
largest changes first. Ranks are matched by rank number; a rank present on one side only is
reported, not guessed.
"""

from __future__ import annotations

from statistics import median

from pydantic import BaseModel, Field

from diagnoser.trace.analysis import Analysis, RankStep
from diagnoser.trace.budget import PARTS

# Changes smaller than this share of the before-window are noise between two captures.
HEADLINE_MIN_SHARE = 0.01
# A median kernel duration that moved by this fraction is a change in the kernel, not noise.
MEDIAN_CHANGE = 0.10
# A median step within 2 % of before is "no faster": two captures of one workload differ that much.
SAME_STEP = 0.02
# A rise in one part of at least this share of another part's fall on the same rank is the
# saving reappearing elsewhere (the critical path moved), not two unrelated changes.
MOVED_SHARE = 0.7


class Change(BaseModel):
    name: str
    before: float | None
    after: float | None

    @property
    def delta(self) -> float | None:
        return None if self.before is None or self.after is None else self.after - self.before


class RankChange(BaseModel):
    rank: int
    step_before: str | None
    step_after: str | None
    window_ms: Change
    parts_ms: list[Change] = Field(description="budget parts of the representative step, ms")


class Comparison(BaseModel):
    before: list[str]
    after: list[str]
    median_step_ms: Change
    critical_rank: Change = Field(description="of the representative step; the kernel classes are this rank's")
    ranks: list[RankChange]
    kernel_classes_ms: list[Change] = Field(description="critical rank, total kernel time per class")
    kernel_classes_count: list[Change] = Field(description="critical rank, kernels per class")
    kernel_classes_median_us: list[Change] = Field(description="critical rank, median kernel duration per class: faster or fewer?")
    collectives: list[Change] = Field(description="count, median wait and transfer (µs)")
    verdict: str = Field(description="faster, slower or no faster, and where a saving went when the step did not move")
    headline: list[str] = Field(description="largest changes first, in words")


def representative_row(analysis: Analysis, rank: int) -> RankStep | None:
    """The rank's row of the representative step, else its first step."""
    rows = [r for r in analysis.rank_steps if r.rank == rank]
    return next((r for r in rows if r.key == analysis.representative), rows[0] if rows else None)


def _rank_change(rank: int, before: RankStep | None, after: RankStep | None) -> RankChange:
    def ms(row: RankStep | None, part: str | None = None) -> float | None:
        if row is None:
            return None
        return (row.parts_ns[part] if part else row.window_ns) / 1e6

    return RankChange(
        rank=rank,
        step_before=before.key if before else None,
        step_after=after.key if after else None,
        window_ms=Change(name="window", before=ms(before), after=ms(after)),
        parts_ms=[Change(name=p, before=ms(before, p), after=ms(after, p)) for p in PARTS],
    )


def _by_class(analysis: Analysis, field: str) -> dict[str, float]:
    """The kernel table has one row per class (and implementation, for communication)."""
    scale = 1e-3 if field == "total_us" else 1.0
    return {
        f"{row.kernel_class}/{row.implementation}" if row.implementation else row.kernel_class: getattr(row, field) * scale
        for row in analysis.kernel_table
    }


def _class_changes(before: Analysis, after: Analysis, field: str) -> list[Change]:
    b, a = _by_class(before, field), _by_class(after, field)
    return [Change(name=name, before=b.get(name, 0.0), after=a.get(name, 0.0)) for name in sorted(set(b) | set(a))]


def _collective_changes(before: Analysis, after: Analysis) -> list[Change]:
    def stat(analysis: Analysis, field: str) -> float | None:
        values = [getattr(c, field) for c in analysis.collectives]
        return float(median(values)) if values else None

    return [
        Change(name="count", before=len(before.collectives), after=len(after.collectives)),
        Change(name="median wait_us", before=stat(before, "wait_us"), after=stat(after, "wait_us")),
        Change(name="median transfer_us", before=stat(before, "transfer_us"), after=stat(after, "transfer_us")),
    ]


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


def _critical_rank(analysis: Analysis) -> int | None:
    return next((s.critical_rank for s in analysis.steps if s.key == analysis.representative), None)


def _headline(critical: Change, ranks: list[RankChange], classes: list[Change], medians: list[Change]) -> list[str]:
    lines: list[tuple[float, str]] = []
    if critical.before != critical.after:
        lines.append((float("inf"), f"critical rank {_fmt(critical.before)} -> {_fmt(critical.after)}: kernel classes compare different ranks"))
    for rc in ranks:
        if rc.window_ms.delta is None:
            side = "after" if rc.window_ms.before is None else "before"
            lines.append((float("inf"), f"rank {rc.rank} appears only {side}"))
            continue
        floor = HEADLINE_MIN_SHARE * (rc.window_ms.before or 0.0)
        for part in rc.parts_ms:
            if part.delta is not None and abs(part.delta) >= floor:
                lines.append((abs(part.delta), f"rank {rc.rank}: {part.name} {part.before:.2f} -> {part.after:.2f} ms ({part.delta:+.2f})"))
    for change in classes:
        floor = HEADLINE_MIN_SHARE * max(change.before or 0.0, change.after or 0.0)
        if change.delta and abs(change.delta) >= floor and abs(change.delta) > 0:
            lines.append((abs(change.delta), f"{change.name} kernels: {change.before:.2f} -> {change.after:.2f} ms ({change.delta:+.2f})"))
    ordered = [text for _, text in sorted(lines, key=lambda item: -item[0])]
    # A kernel that itself got slower or faster matters even when its total time is small.
    for change in medians:
        if change.before and change.after and abs(change.after / change.before - 1) >= MEDIAN_CHANGE:
            ordered.append(f"{change.name} median kernel: {change.before:.1f} -> {change.after:.1f} µs")
    return ordered


def _moved(ranks: list[RankChange]) -> str:
    """The largest fall in one part that reappeared as a rise in another on the same rank."""
    best: tuple[float, str] | None = None
    for rc in ranks:
        deltas = [(p.delta, p.name) for p in rc.parts_ms if p.delta is not None]
        if not deltas:
            continue
        fall, fell = min(deltas)
        rise, rose = max(deltas)
        if fall < 0 < rise and rise >= MOVED_SHARE * -fall and (best is None or -fall > best[0]):
            best = (-fall, f"on rank {rc.rank} {fell} fell {-fall:.2f} ms while {rose} rose {rise:.2f} ms")
    return best[1] if best else ""


def _verdict(step: Change, ranks: list[RankChange]) -> str:
    if step.delta is None or not step.before:
        return "no step to compare on one side"
    change = step.delta / step.before
    figures = f"median step {step.before:.2f} -> {step.after:.2f} ms ({change:+.1%})"
    if abs(change) < SAME_STEP:
        moved = _moved(ranks)
        where = f"; {moved}: the saving moved into another part of the step, which the critical path now runs through" if moved else ""
        return f"no faster: {figures}{where}"
    return f"{'faster' if change < 0 else 'slower'}: {figures}, {step.before / step.after:.3f}x"


def compare_analyses(before: Analysis, after: Analysis) -> Comparison:
    ranks = [
        _rank_change(rank, representative_row(before, rank), representative_row(after, rank))
        for rank in sorted(set(before.ranks) | set(after.ranks))
    ]
    classes_ms = _class_changes(before, after, "total_us")
    medians = _class_changes(before, after, "median_us")
    critical = Change(name="critical rank", before=_critical_rank(before), after=_critical_rank(after))
    step = Change(name="median step", before=before.median_step_ms, after=after.median_step_ms)
    return Comparison(
        before=before.sources,
        after=after.sources,
        median_step_ms=step,
        critical_rank=critical,
        ranks=ranks,
        kernel_classes_ms=classes_ms,
        kernel_classes_count=_class_changes(before, after, "count"),
        kernel_classes_median_us=medians,
        collectives=_collective_changes(before, after),
        verdict=_verdict(step, ranks),
        headline=_headline(critical, ranks, classes_ms, medians),
    )
