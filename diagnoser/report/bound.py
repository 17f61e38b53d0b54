"""Text rendering of a ``BoundReport`` (the JSON form is the model itself)."""

from __future__ import annotations

from collections import OrderedDict

from rich.console import Console
from rich.table import Table

from diagnoser.bound import BoundReport, FloorResult, RankEstimate
from diagnoser.report.figures import ms, num, size


def _group_ranks(report: BoundReport) -> "OrderedDict[tuple, list[RankEstimate]]":
    """Ranks with identical traffic collapse into one row: symmetric layouts stay readable."""
    groups: OrderedDict[tuple, list[RankEstimate]] = OrderedDict()
    for est in report.per_rank:
        key = (est.stage, tuple(sorted((k, round(v)) for k, v in est.components.items())))
        groups.setdefault(key, []).append(est)
    return groups


def _rank_label(estimates: list[RankEstimate]) -> str:
    first, alike = min(e.rank for e in estimates), sum(e.ranks_alike for e in estimates)
    return str(first) if alike == 1 else f"{first} (+{alike - 1} alike)"


def render_bound(report: BoundReport, console: Console) -> None:
    layout = report.layout
    console.print(
        f"[bold]{report.model}[/] on {report.hardware}: batch {report.batch}, mean context {report.mean_context:.0f}, "
        f"TP={layout.tp} EP={layout.ep} PP={layout.pp} DP={layout.dp} (expert TP={layout.moe_tp})"
    )
    source = "measured" if report.bandwidth_is_measured else "datasheet"
    console.print(f"bandwidth {report.bandwidth_gbs:.0f} GB/s ({source}); the critical rank is {report.critical_rank}")

    table = Table(title="bytes per decode step, per rank", show_lines=False)
    groups = _group_ranks(report)
    columns = [_rank_label(estimates) for estimates in groups.values()]
    table.add_column("component")
    for label in columns:
        table.add_column(f"rank {label}", justify="right")
    names = list(dict.fromkeys(name for est in report.per_rank for name in est.components))
    firsts = [estimates[0] for estimates in groups.values()]
    for name in names:
        table.add_row(name, *(size(est.components.get(name, 0.0)) for est in firsts))
    table.add_row("[bold]total[/]", *(f"[bold]{size(est.bytes_total)}[/]" for est in firsts))
    table.add_row("memory time", *(ms(est.memory_ms) for est in firsts))
    table.add_row("compute time", *(ms(est.compute_ms) if not est.untimed_flops_dtypes else
                                    f"{ms(est.compute_ms)} + {', '.join(est.untimed_flops_dtypes)} untimed" for est in firsts))
    console.print(table)

    if report.expert_union:
        u = report.expert_union
        console.print(
            f"experts touched per MoE layer on the busiest rank: {u.touched_per_layer_busiest_rank:.3g} of "
            f"{u.local_experts:.4g} local ({u.group_tokens:.4g} tokens; {u.source}); "
            f"'active parameters' would say {u.touched_per_layer_if_active_params:.3g}; "
            f"{u.rows_per_touched_expert:.3g} rows per expert GEMM"
        )
    console.print(
        f"memory-only floor {ms(report.floor_ms)}, compute floor {ms(report.compute_floor_ms)} -> "
        f"step floor {ms(report.step_floor_ms)}; optimistic ceiling {num(report.ceiling_tokens_per_s)} tokens/s "
        f"({num(report.per_user_ceiling_tokens_per_s)} per sequence)"
    )
    n = report.naive
    console.print(
        f"naive 'active parameters x bytes': {n.active_parameters / 1e9:.3g}B params -> {size(n.bytes_total)}, "
        f"{size(n.bytes_per_rank)} per rank if split evenly, {ms(n.floor_ms)} "
        f"(the busiest rank really moves {n.ratio_real_to_naive:.3g}x that)"
    )
    render_observation(report, console)
    for line in report.notes:
        console.print(f"[bold]note:[/] {line}")
    console.print("[bold]counts:[/] " + "; ".join(report.counts))
    console.print("[bold]leaves out:[/] " + "; ".join(report.excludes))
    for line in report.sanity:
        console.print(f"sanity: {line}")


def render_observation(result: BoundReport | FloorResult, console: Console) -> None:
    if result.observed_step_ms is None:
        console.print("no observation given: pass --observed-step-ms or --observed-tokens-per-s to compare")
        return
    console.print(
        f"observed {ms(result.observed_step_ms)} per step = {num(result.observed_tokens_per_s)} tokens/s "
        f"at {result.boundary.value}: {result.fraction_of_ceiling:.1%} of the ceiling; "
        f"unexplained {ms(result.unexplained_ms)}"
    )


def render_floor(result: FloorResult, bytes_per_step: float, bandwidth_gbs: float, console: Console) -> None:
    console.print(
        f"memory-only floor = {size(bytes_per_step)} / {num(bandwidth_gbs / 1e3)} TB/s = {ms(result.floor_ms)} "
        f"-> ceiling {num(result.ceiling_tokens_per_s)} tokens/s"
    )
    render_observation(result, console)
    for line in result.sanity:
        console.print(f"sanity: {line}")
