"""Bound: what the pin implies per rank, beside what was observed, and what the bound leaves out.

Figures come from ``compute_bound`` (per-rank bytes, floors, the naive figure, the scope) and
from the engine's bound summary (the observation it was compared with).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from diagnoser.report.figures import ms, num, size
from diagnoser.tui.screens.base import StageScreen
from diagnoser.tui.widgets import BarChart



class BoundScreen(StageScreen):
    STAGE = "bound"
    AUTO_FOCUS = "#bound-view"

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="bound-view", can_focus=True):
            yield Static("", id="bound-head")
            yield Static("", id="bound-compare")
            yield BarChart(id="bound-rates")
            yield BarChart(id="bound-components")
            yield BarChart(id="bound-ranks")
            yield Static("", id="bound-scope")

    def show(self) -> None:
        w = self.workspace
        report, summary = w.bound, w.diagnosis.bound
        rates, components, ranks = (self.query_one(f"#bound-{name}", BarChart) for name in ("rates", "components", "ranks"))
        compare = _comparison(summary) if summary is not None else Text("no observation to compare: give observed figures on the Pin screen")
        self.query_one("#bound-compare", Static).update(compare)
        if report is None:
            note = w.diagnosis.bound_note or "no pin yet: pin the model, GPU, batch and context on the Pin screen (1)"
            self.query_one("#bound-head", Static).update(Text(note))
            rates.display = components.display = ranks.display = False
            self.query_one("#bound-scope", Static).update("")
            return
        self.query_one("#bound-head", Static).update(_heading(report))
        rates.display = summary is not None and summary.ceiling_tokens_per_s is not None and report.observed_tokens_per_s is not None
        if rates.display:
            rates.show("tokens/s: the ceiling beside the observed rate", [
                ("ceiling", summary.ceiling_tokens_per_s, num(summary.ceiling_tokens_per_s)),
                ("observed", report.observed_tokens_per_s, num(report.observed_tokens_per_s)),
            ])
        critical = next(r for r in report.per_rank if r.rank == report.critical_rank)
        components.display = True
        components.show(
            f"bytes per decode step on rank {critical.rank}, the critical one",
            [(name, value, size(value)) for name, value in critical.components.items()],
        )
        ranks.display = len(report.per_rank) > 1
        if ranks.display:
            ranks.show("total bytes per rank", [
                (f"rank {r.rank}" + (f" (+{r.ranks_alike - 1} alike)" if r.ranks_alike > 1 else ""), r.bytes_total, size(r.bytes_total))
                for r in report.per_rank
            ])
        self.query_one("#bound-scope", Static).update(_scope(report))


def _heading(report) -> Text:
    layout = report.layout
    source = "measured" if report.bandwidth_is_measured else "datasheet"
    return Text.assemble(
        (report.model, "bold"),
        f" on {report.hardware}: batch {report.batch}, mean context {report.mean_context:.0f}, "
        f"TP={layout.tp} EP={layout.ep} PP={layout.pp} DP={layout.dp}\n",
        f"bandwidth {report.bandwidth_gbs:.0f} GB/s ({source}); critical rank {report.critical_rank}\n",
        ("floors: ", "bold"),
        f"memory {ms(report.floor_ms)}, compute {ms(report.compute_floor_ms)} -> step floor "
        f"{ms(report.step_floor_ms)}; ceiling {num(report.ceiling_tokens_per_s)} tokens/s",
    )


def _comparison(summary) -> Text:
    if summary.observed_step_ms is None:
        return Text("no observed step to compare with the floor")
    text = Text()
    text.append("observed ", style="bold")
    text.append(f"{ms(summary.observed_step_ms)} per step against a floor of {ms(summary.floor_ms)} ({summary.limited_by}-limited)")
    if summary.fraction_of_ceiling is not None:
        text.append(f": {summary.fraction_of_ceiling:.0%} of the ceiling")
    if summary.unexplained_ms is not None:
        text.append("\nunexplained ", style="bold")
        text.append(f"{ms(summary.unexplained_ms)} per step, not yet attributed to any cause")
    return text


def _scope(report) -> Text:
    n = report.naive
    text = Text()
    if report.expert_union:
        u = report.expert_union
        text.append(
            f"experts touched per MoE layer on the busiest rank: {u.touched_per_layer_busiest_rank:.3g} of {u.local_experts:.4g} "
            f"({u.source}); {u.rows_per_touched_expert:.3g} rows per expert GEMM\n"
        )
    text.append("naive 'active parameters x bytes': ", style="bold")
    text.append(
        f"{n.active_parameters / 1e9:.3g}B params -> {size(n.bytes_total)}, {size(n.bytes_per_rank)} per rank, "
        f"{ms(n.floor_ms)}; the busiest rank really moves {n.ratio_real_to_naive:.3g}x that\n"
    )
    text.append("counts: ", style="bold")
    text.append("; ".join(report.counts) + "\n")
    text.append("leaves out: ", style="bold")
    text.append("; ".join(report.excludes))
    for line in report.sanity:
        text.append(f"\nsanity: {line}", style="italic")
    return text
