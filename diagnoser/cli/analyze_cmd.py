"""``diagnoser analyze``: profiler traces to a step budget, a kernel table and facts.

Heavy imports (numpy, the readers) happen inside the command so ``diagnoser --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import click

from diagnoser.cli.report_output import emit, output_option, wrote
from diagnoser.cli.step_options import step_options

_PART_LABELS = {
    "device": "device (compute/memory)",
    "exposed_comm": "exposed communication",
    "launch": "launch (host-bound)",
    "queue": "queue (launched, waiting)",
    "host": "host (sync, D2H, gaps)",
}


@click.command("analyze")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@step_options
@click.option(
    "--align",
    type=click.Choice(["clock", "collective"]),
    default="clock",
    show_default=True,
    help="put ranks on one clock by their trace clocks, or by making the first collective end together",
)
@click.option("--json", "as_json", is_flag=True, help="print the analysis and the facts as JSON")
@click.option(
    "--case",
    "case_in",
    type=click.Path(path_type=Path),
    metavar="CASE",
    help="add the facts to this case file: it is read, never rewritten; the result goes to --case-out",
)
@click.option(
    "--case-out",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="where the case with the facts goes (default: CASE when it does not exist yet, else CASE.analyzed.yaml "
    "beside it)",
)
@click.option(
    "--perfetto",
    "perfetto_out",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="write a Chrome/Perfetto trace of the budget to FILE",
)
@click.option(
    "--memory",
    default="2G",
    show_default=True,
    metavar="SIZE",
    help="memory the ranks read at once may hold together (K/M/G); fewer are read in parallel to stay under it",
)
@click.option(
    "--summary-out",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="write the ranks' per-step summaries to FILE instead of a report, for a later --merge (one per node)",
)
@click.option("--merge", is_flag=True, help="TRACES are --summary-out files: merge them into the analysis of all their ranks")
@output_option
def analyze(
    traces: tuple[Path, ...],
    step_range: str | None,
    steps_from: str,
    align: str,
    as_json: bool,
    case_in: Path | None,
    case_out: Path | None,
    perfetto_out: Path | None,
    memory: str,
    summary_out: Path | None,
    merge: bool,
    output: Path | None,
) -> None:
    """Turn profiler traces (Kineto JSON, a directory of ranks, Nsight SQLite/.nsys-rep) into a per-step budget.

    No input is ever written: the facts go into a new case file, the budget trace and the
    report into the files named.
    """
    from diagnoser.analysis_stages import STAGES, analyze_in_stages
    from diagnoser.cli.progress import progress
    from diagnoser.fileio import check_outputs, merged_case_path, write_atomic

    if case_in is not None:
        case_out = merged_case_path(case_in, "analyzed", case_out)
    case_existed = case_in is not None and case_in.exists()  # before the facts may create it
    inputs = [*traces, *([case_in] if case_existed else [])]
    check_outputs(
        [("--perfetto", perfetto_out), ("-o", output), ("--case-out", case_out), ("--summary-out", summary_out)], inputs
    )
    case = _base_case(case_in, case_out)
    memory_bytes = _memory_bytes(memory)
    if summary_out is not None:
        _write_summaries(traces, summary_out, memory_bytes, step_range, align, steps_from)
        return

    if merge:
        from diagnoser.trace.analysis import merge_ranks
        from diagnoser.trace.facts import to_observations
        from diagnoser.trace.summaries import read_summaries

        analysis = merge_ranks(read_summaries(list(traces)))
        observations = to_observations(analysis)
    else:
        with progress("analyze", STAGES) as update:
            analysis, observations = analyze_in_stages(
                [str(t) for t in traces], lambda done, _, text: update(completed=done, text=text), step_range, align,
                steps_from, memory_bytes, keep_segments=perfetto_out is not None,
            )
    written = [path for path in (case_out, perfetto_out) if path is not None]
    if written and analysis.budget() is None:
        click.echo(f"diagnoser: no step budget in these traces: nothing written to {', '.join(map(str, written))}", err=True)
    elif written:
        if case_out is not None:
            write_atomic(case_out, _case_text(case, case_out, observations))
            kept = f" ({case_in} is unchanged)" if case_existed else ""
            wrote(case_out, "the case with the trace facts", kept)
        if perfetto_out is not None:
            from diagnoser.trace.perfetto import perfetto_trace

            write_atomic(perfetto_out, perfetto_trace(analysis))
            wrote(perfetto_out, "the budget trace")
    if as_json:
        import orjson

        payload = {
            "analysis": analysis.model_dump(mode="json"),
            "observations": observations.model_dump(mode="json", exclude_none=True),
        }
        emit(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode(), output)
        return
    if output is None:
        from diagnoser.report.console import stdout_console

        _print_report(stdout_console(), analysis, observations)
        return
    from io import StringIO

    from rich.console import Console

    from diagnoser.report.console import PIPE_WIDTH

    console = Console(file=StringIO(), width=PIPE_WIDTH, highlight=False)
    _print_report(console, analysis, observations)
    emit(console.file.getvalue(), output)


def _write_summaries(traces, path: Path, memory: int, step_range, align: str, steps_from: str) -> None:
    """This node's share of a multi-node analysis (``trace.summaries``)."""
    from diagnoser.fileio import write_atomic
    from diagnoser.trace.analysis import summarize_traces
    from diagnoser.trace.load import load_traces
    from diagnoser.trace.summaries import summaries_text

    summaries = summarize_traces(load_traces(list(traces), memory=memory), step_range, align, steps_from)
    write_atomic(path, summaries_text(summaries))
    wrote(path, f"the summaries of ranks {[s.rank for s in summaries]} (merge them: diagnoser analyze --merge FILE...)")


def _memory_bytes(text: str) -> int:
    from diagnoser.trace.memory_budget import parse_size

    try:
        return parse_size(text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--memory") from None


def _base_case(case_in: Path | None, case_out: Path | None):
    """The case the facts are added to: CASE as it is, or a new one (read before any trace, so a
    broken case fails fast). The case models are imported only when a case is named: a plain
    ``analyze`` would build them for nothing on every start."""
    named = case_in or case_out
    if named is None:
        return None
    from diagnoser.models.case import Case, load_case

    if case_in is not None and case_in.exists():
        return load_case(case_in)
    return Case(title=f"analyze {named.stem}")


def _case_text(case, path: Path, observations) -> str:
    """The case with the trace-derived facts replaced and everything else kept, in ``path``'s format."""
    trace_fields = (
        "budget",
        "rank_budgets",
        "kernel_classes",
        "graph",
        "collectives",
        "host",
        "step_mix",
        "kernel_sum_across_ranks_ms",
    )
    case = case.model_copy(
        update={"observations": case.observations.model_copy(update={f: getattr(observations, f) for f in trace_fields})}
    )
    if path.suffix in (".yaml", ".yml"):
        import yaml

        return yaml.safe_dump(case.model_dump(mode="json", exclude_none=True), sort_keys=False)
    return case.model_dump_json(indent=2, exclude_none=True)


def _print_report(console, analysis, observations) -> None:
    from rich.table import Table

    from diagnoser.report.untrusted import markup_safe

    row = analysis.budget()
    if row is None:
        console.print("no step launched any device work: nothing to budget")
        return
    which = "decode-only step" if analysis.decode_only else "step"
    console.print(
        f"[bold]{len(analysis.steps)} steps[/] ({analysis.method}) on ranks {analysis.ranks}; "
        f"median {which} {analysis.median_step_ms:.3f} ms, spread (p90-p10) {analysis.step_spread_ms:.3f} ms"
    )
    if observations.step_mix is not None:
        console.print(_step_mix_line(observations.step_mix, sum(s.kind == "empty" for s in analysis.steps)))
    console.print(f"[bold]Budget[/] of {row.step}, critical rank {row.rank}: {row.window_ns / 1e6:.3f} ms")
    waterfall = Table(show_header=True, header_style="bold")
    for name in ("part", "ms", "share", ""):
        waterfall.add_column(name, justify="right" if name in ("ms", "share") else "left")
    cumulative = 0
    width = 24
    for part, ns in row.parts_ns.items():
        begin = round(width * cumulative / row.window_ns)
        cumulative += ns
        end = round(width * cumulative / row.window_ns)
        bar = " " * begin + "█" * max(end - begin, 1 if ns else 0)
        waterfall.add_row(_PART_LABELS[part], f"{ns / 1e6:.3f}", f"{ns / row.window_ns:.1%}", bar)
    waterfall.add_row("[bold]step[/]", f"[bold]{row.window_ns / 1e6:.3f}[/]", "100%", "")
    console.print(waterfall)
    console.print(
        f"graph replay: {row.graph_status} ({row.graph_launches} graph launches, {row.kernel_launches} eager launches, "
        f"{row.graph_ops} device ops replayed by graphs)"
    )
    if row.h2d_ns:
        console.print(
            f"host-to-device copies: {row.h2d_ns / 1e6:.3f} ms of the device part over PCIe "
            f"({row.h2d_exposed_ns / 1e6:.3f} ms with no kernel running), {row.h2d_bytes / 1e9:.3f} GB"
        )
    console.print(
        f"kernel time summed over ranks and steps: {analysis.kernel_sum_across_ranks_ms:.3f} ms "
        "[italic](not elapsed time)[/]"
    )
    steps = "decode-only steps" if analysis.decode_only else "all steps"
    kt = Table(title=f"Kernel classes, rank {row.rank}, {steps}", header_style="bold")
    for name in (
        "class",
        "count/step",
        "total ms",
        "median µs",
        "CTAs",
        "SMs",
        "under-filled",
        "TFLOP/s",
        "TB/s",
        "roof",
        "top kernel",
    ):
        kt.add_column(name)
    for k in analysis.kernel_table:
        label = f"{k.kernel_class}/{k.implementation}" if k.implementation else k.kernel_class
        kt.add_row(
            markup_safe(label),
            f"{k.count_per_step:.1f}",
            f"{k.total_us / 1000:.3f}",
            f"{k.median_us:.1f}",
            _opt(k.median_grid_ctas),
            _opt(k.sm_count),
            {True: "yes", False: "no", None: "?"}[k.underfilled],
            _opt(k.achieved_tflops, ".1f"),
            _opt(k.achieved_tbs, ".2f"),
            _roof(k),
            markup_safe(k.top_kernel[:50]),
        )
    console.print(kt)
    for c in observations.collectives:
        skew = (
            f", wait {c.wait_ms:.3f} ms, transfer {c.transfer_ms:.3f} ms, late rank {c.late_rank}"
            if c.wait_ms is not None
            else ""
        )
        size = f", message {c.message_bytes:,.0f} B" if c.message_bytes is not None else ""
        bandwidth = f", {c.effective_bandwidth_gbs:.1f} GB/s" if c.effective_bandwidth_gbs is not None else ""
        console.print(
            f"collective {markup_safe(c.op)}/{markup_safe(c.implementation)}: {c.calls_per_step:.1f} per step, "
            f"{c.interval_ms:.3f} ms per step{skew}{size}{bandwidth}"
        )
    for note in analysis.notes:
        console.print(f"[dim]note: {note}[/]")


def _step_mix_line(mix, empty: int) -> str:
    """The steps by what they held, since the budget above is of the decode-only ones alone."""
    parts = []
    if mix.decode_steps:
        parts.append(f"{mix.decode_steps} decode-only (median {mix.decode_step_ms:.3g} ms)")
    if mix.mixed_steps:
        tokens = "" if mix.prefill_tokens_per_mixed_step is None else f", median {mix.prefill_tokens_per_mixed_step:g} prompt tokens"
        parts.append(f"{mix.mixed_steps} mixed (median {mix.mixed_step_ms:.3g} ms{tokens})")
    if mix.prefill_steps:
        parts.append(f"{mix.prefill_steps} prefill")
    if empty:
        parts.append(f"{empty} empty")
    return f"steps: {', '.join(parts)}"


def _opt(value, spec: str = "g") -> str:
    return "?" if value is None else format(value, spec)


def _roof(row) -> str:
    """Where the class sits under the roofline: which roof, and the fraction of it reached."""
    if row.roofline_bound is None:
        return "?"
    return f"{row.roofline_bound} {row.roof_fraction:.0%}"
