"""`diagnoser nsys`: capture with Nsight Systems, export, run recipes, compare two captures.

Every subcommand ends in something the rest of diagnoser reads: a SQLite export (which
``diagnoser analyze`` takes), recipe facts, or a comparison. stdout carries only the result
(JSON with ``--json``), or ``-o FILE`` takes it (``profile`` keeps ``-o`` for the report's
name, as nsys does); warnings and the files written go to stderr.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from diagnoser.cli.params import Number
from diagnoser.cli.report_output import emit, output_option
from diagnoser.cli.step_options import step_options
from diagnoser.trace.nsys_export import CAPTURE_RANGES, GRAPH_TRACE_MODES

_JSON_HELP = "print the result as JSON"


@click.group()
def nsys() -> None:
    """Drive Nsight Systems: profile, export, recipes, compare.

    Needs the `nsys` command on PATH, except to read existing exports (show, compare) or recipe folders.
    """


def _show(exports: list[Path], as_json: bool, step_range: str | None, steps_from: str, output: Path | None = None) -> None:
    """One line per rank: what was read, and the budget of its representative step."""
    from diagnoser.trace.analysis import analyze_traces
    from diagnoser.trace.compare import representative_row
    from diagnoser.trace.nsys_sqlite import read_nsys_exports

    traces = read_nsys_exports(exports)
    analysis = analyze_traces(traces, step_range, steps_from=steps_from)
    ranks = []
    for trace in traces:
        row = representative_row(analysis, trace.rank)
        ranks.append({
            "rank": trace.rank, "source": trace.source, "device": trace.device_name,
            "kernels": len(trace.kernels), "copies": len(trace.copies),
            "runtime_calls": len(trace.runtime), "ranges": len(trace.all_ranges()),
            "step": row.key if row else None, "window_ms": row.window_ns / 1e6 if row else None,
            "parts_ms": {k: v / 1e6 for k, v in row.parts_ns.items()} if row else {},
        })
    if as_json:
        emit(json.dumps({"exports": [str(e) for e in exports], "ranks": ranks, "collectives": len(analysis.collectives),
                         "notes": analysis.notes}, indent=2), output)
        return
    lines = [" ".join(map(str, exports))]
    for r in ranks:
        parts = "  ".join(f"{k} {v:.2f}" for k, v in r["parts_ms"].items())
        window = f"{r['window_ms']:.2f} ms" if r["window_ms"] is not None else "no step"
        lines.append(f"rank {r['rank']}: {r['kernels']} kernels, {r['copies']} copies, {r['runtime_calls']} API calls, "
                     f"{r['ranges']} NVTX ranges; step {r['step']}: {window} = {parts}")
    lines.append(f"collectives matched across ranks: {len(analysis.collectives)}")
    lines.extend(f"note: {note}" for note in analysis.notes)
    lines.append(f"full budget, kernel table and facts: diagnoser analyze {' '.join(map(str, exports))}")
    emit("\n".join(lines), output)


def _check_output(output: Path | None, inputs: list[Path]) -> None:
    from diagnoser.fileio import check_outputs

    check_outputs([("-o", output)], inputs)


@nsys.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("diagnoser-profile"), show_default=True,
              help="report name; nsys adds .nsys-rep")
@click.option("--cuda-graph-trace", type=click.Choice(GRAPH_TRACE_MODES),
              help="node: record every kernel a CUDA graph replays (costs overhead)")
@click.option("--capture-range", type=click.Choice(CAPTURE_RANGES), default="none", show_default=True,
              help="record only between cudaProfilerStart/Stop or inside an NVTX range")
@click.option("--capture-range-end", default="stop", show_default=True, help="stop, or repeat[:N]")
@click.option("--nvtx-capture", metavar="RANGE[@DOMAIN]", help="the range to capture with --capture-range nvtx")
@click.option("--fork", is_flag=True, help="also trace worker processes started by fork+exec (vLLM, SGLang)")
@click.option("--timeout", type=Number(float, 1), default=None, help="seconds before the run is stopped (default: none)")
@step_options
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def profile(output: Path, cuda_graph_trace: str | None, capture_range: str, capture_range_end: str,
            nvtx_capture: str | None, fork: bool, timeout: float | None, step_range: str | None, steps_from: str,
            as_json: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND under nsys profile, export the report and read it.

    -o names the Nsight report, as for nsys; the summary goes to stdout.
    Example: diagnoser nsys profile --cuda-graph-trace node --fork -- python serve.py
    """
    from diagnoser.trace.nsys_export import ProfileOptions, export_sqlite
    from diagnoser.trace.nsys_export import profile as run_profile

    options = ProfileOptions(output=output, cuda_graph_trace=cuda_graph_trace, capture_range=capture_range,
                             capture_range_end=capture_range_end, nvtx_capture=nvtx_capture, fork=fork)
    report, code = run_profile(options, list(command), timeout)
    if code:
        click.echo(f"diagnoser: warning: the profiled command exited with code {code}; reading its report anyway", err=True)
    _show([export_sqlite(report)], as_json, step_range, steps_from)


@nsys.command()
@click.argument("report", type=click.Path(path_type=Path))
@click.option("--out-dir", type=click.Path(path_type=Path), help="where the .sqlite goes (default: beside the report)")
@click.option("--timeout", type=Number(float, 1), default=600, show_default=True, help="seconds `nsys export` may take")
@step_options
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@output_option
def export(report: Path, out_dir: Path | None, timeout: float, step_range: str | None, steps_from: str, as_json: bool,
           output: Path | None) -> None:
    """Export REPORT (.nsys-rep) to SQLite and read it."""
    from diagnoser.trace.nsys_export import export_sqlite

    _check_output(output, [report])
    _show([export_sqlite(report, out_dir, timeout)], as_json, step_range, steps_from, output)


@nsys.command(short_help="Read SQLite exports (or .nsys-rep files), one per rank, and summarise each rank.")
@click.argument("export_files", metavar="EXPORT...", nargs=-1, required=True, type=click.Path(path_type=Path))
@step_options
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@output_option
def show(export_files: tuple[Path, ...], step_range: str | None, steps_from: str, as_json: bool, output: Path | None) -> None:
    """Read EXPORT... (.sqlite, or .nsys-rep exported first; one per rank is fine) and summarise each rank."""
    from diagnoser.trace.nsys_export import REPORT_SUFFIXES, export_sqlite

    _check_output(output, list(export_files))
    _show([export_sqlite(f) if f.suffix in REPORT_SUFFIXES else f for f in export_files], as_json, step_range, steps_from,
          output)


@nsys.command(short_help="Run `nsys recipe NAME` on one report per rank and read its output into facts.")
@click.argument("name")
@click.argument("reports", metavar="REPORT...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out-dir", "--out", "out_dir", type=click.Path(path_type=Path),
              help="recipe output folder (default: REPORT.NAME)")
@click.option("--timeout", type=Number(float, 1), default=1800, show_default=True, help="seconds `nsys recipe` may take")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@output_option
def recipe(name: str, reports: tuple[Path, ...], out_dir: Path | None, timeout: float, as_json: bool,
           output: Path | None) -> None:
    """Run `nsys recipe NAME` on REPORT... (one per rank) and read its output into facts.

    A single existing recipe output folder is read without running nsys.
    Read: cuda_gpu_kern_sum, cuda_gpu_time_util_map, nccl_gpu_overlap_trace, nvtx_gpu_proj_trace.
    """
    from diagnoser.trace.recipes import read_recipe_output, run_recipe

    _check_output(output, list(reports))
    if len(reports) == 1 and reports[0].is_dir():
        folder = reports[0]
    else:
        folder = run_recipe(name, list(reports), out_dir, timeout)
    facts = read_recipe_output(name, folder)
    if as_json:
        emit(facts.model_dump_json(indent=2), output)
        return
    lines = [f"{facts.recipe}: {len(facts.rows)} rows from {facts.table}"]
    lines.extend(f"  {key}: {value:,.4g}" for key, value in facts.summary.items())
    emit("\n".join(lines), output)


@nsys.command()
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@step_options
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
@output_option
def compare(before: Path, after: Path, step_range: str | None, steps_from: str, as_json: bool, output: Path | None) -> None:
    """What changed from BEFORE to AFTER (two captures of the same workload, any trace format)."""
    from diagnoser.trace.analysis import analyze_traces
    from diagnoser.trace.compare import compare_analyses
    from diagnoser.trace.load import load_traces

    _check_output(output, [before, after])
    result = compare_analyses(*(analyze_traces(load_traces([path]), step_range, steps_from=steps_from) for path in (before, after)))
    if as_json:
        emit(result.model_dump_json(indent=2), output)
        return
    lines = [result.verdict]
    lines.extend(f"  {line}" for line in result.headline or ["no change above 1% of the step"])
    c = {x.name: x for x in result.collectives}
    if c["count"].before or c["count"].after:
        lines.append(f"collectives: {c['count'].before:.0f} -> {c['count'].after:.0f}; median wait "
                     f"{c['median wait_us'].before} -> {c['median wait_us'].after} µs")
    emit("\n".join(lines), output)
