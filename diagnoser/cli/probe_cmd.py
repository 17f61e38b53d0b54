"""`diagnoser probe`: measure this machine and print one report (or fold it into a case).

stdout carries only the result (the JSON document with ``--json``, Markdown with
``--markdown``, else the status table and each probe's figures) so scripts can pipe it; logs
and the progress display go to stderr, and only when a person is watching.
"""

from __future__ import annotations

import logging
import shutil
import sys
from typing import Any

import click

from diagnoser.errors import InputError


def parse_option(text: str) -> tuple[str, Any]:
    """KEY=VALUE, the value read as YAML so numbers and lists arrive typed ('batch_sizes=[1,8]')."""
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise InputError(f"--option: expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError:
        raise InputError(f"--option {key.strip()}: cannot read value {value!r}") from None


def workload_options(case_path: str) -> dict[str, Any]:
    """Probe options implied by the case's workload: model, expert sharding, hardware, local batch."""
    from pathlib import Path

    from diagnoser.models.case import load_case

    if not Path(case_path).exists():
        return {}
    workload = load_case(case_path).workload
    if workload is None:
        return {}
    options: dict[str, Any] = {
        "model": workload.model,
        "expert_tp": workload.layout.moe_tp,
        "hardware": workload.hardware,
        # graph capture is tried at the batch one attention rank really runs
        "graph_batch_sizes": sorted({1, workload.batch // workload.layout.dp}),
    }
    if workload.measured_bandwidth_gbs:
        options["measured_bandwidth_gbs"] = workload.measured_bandwidth_gbs
    return options


def resolve_device(requested: str) -> str:
    try:
        import torch
    except ImportError:
        # without the gpu extra the torch probes skip themselves; NVML and client probes still run
        if requested == "cuda":
            raise InputError("--device cuda: torch is not installed (pip install 'diagnoser[gpu]')") from None
        return "cpu"
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: torch sees no CUDA device (no driver, or a CPU-only torch build)")
    return requested


def _logger(console: Any | None) -> logging.Logger:
    """INFO through rich on the shared stderr console when a person watches, else warnings only."""
    log = logging.getLogger("diagnoser.probes")
    log.handlers.clear()
    log.propagate = False
    if console is not None:
        from rich.logging import RichHandler

        log.addHandler(RichHandler(console=console, show_path=False))
        log.setLevel(logging.INFO)
    else:
        log.addHandler(logging.StreamHandler(sys.stderr))
        log.setLevel(logging.WARNING)
    return log


@click.command()
@click.option("--only", "only", help="comma-separated probes to run (device,bandwidth,gemm,graphs,collectives,client,context_sweep)")
@click.option("--json", "as_json", is_flag=True, help="print the report as one JSON document on stdout")
@click.option("--markdown", is_flag=True, help="print the report as Markdown (status, then each probe's figures)")
@click.option("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
@click.option("--case", "case_path", type=click.Path(dir_okay=False), help="read the workload from this case and merge the results into it (created if missing)")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=60.0, show_default=True, help="seconds allowed per probe")
@click.option("--max-memory-fraction", type=click.FloatRange(0.01, 0.9), default=0.25, show_default=True, help="largest share of free memory a probe may take")
@click.option("--endpoint", help="OpenAI-compatible server for the client and context probes, e.g. http://127.0.0.1:8000")
@click.option("--model-name", help="model name to send to the endpoint")
@click.option("--model", help="model whose expert shapes the GEMM sweep uses (preset or config.json); default: the case's")
@click.option("--hardware", help="hardware preset for peak figures (default: the case's, else matched from the device name)")
@click.option("--expert-tp", type=int, help="shards per expert, for the GEMM shapes")
@click.option("--ranks", type=click.IntRange(min=2), help="processes for the collectives probe")
@click.option("--delay-rank", type=int, help="collectives: rank that sleeps before each collective")
@click.option("--delay-ms", type=float, help="collectives: how long that rank sleeps")
@click.option("--option", "extra", multiple=True, metavar="KEY=VALUE", help="any other probe option, repeatable (value read as YAML)")
@click.option("--from-report", type=click.Path(dir_okay=False), help="run nothing: read a saved probe --json report (to print it, or merge it into --case)")
def probe(
    only: str | None,
    as_json: bool,
    markdown: bool,
    output: str | None,
    case_path: str | None,
    from_report: str | None,
    device: str,
    timeout_s: float,
    max_memory_fraction: float,
    extra: tuple[str, ...],
    **flags: Any,
) -> None:
    """Measure device facts, bandwidth, GEMM shapes, graph replay, collectives and client gaps.

    Every probe reports ok, skipped (with the reason) or failed (with the reason); one that
    fails never stops the others, and a machine without a GPU is a normal result.
    """
    if as_json and markdown:
        raise InputError("--json and --markdown: choose one output format")
    if from_report:
        from diagnoser.probes.report import load_report

        report = load_report(from_report)
    else:
        report = _measure(only, case_path, device, timeout_s, max_memory_fraction, extra, flags)
    if case_path:
        from diagnoser.probes.to_case import update_case_file

        update_case_file(case_path, report)
        logging.getLogger("diagnoser.probes").info("merged into %s", case_path)
    _emit(report, as_json, markdown, output)


def _measure(
    only: str | None, case_path: str | None, device: str, timeout_s: float, max_memory_fraction: float,
    extra: tuple[str, ...], flags: dict[str, Any],
) -> Any:
    """Run the chosen probes with the options the case, the flags and --option give (in that order)."""
    from rich.console import Console

    from diagnoser.probes.base import ProbeContext
    from diagnoser.probes.registry import select

    names = select(only.split(",") if only else None)
    options: dict[str, Any] = workload_options(case_path) if case_path else {}
    options.update({key: value for key, value in flags.items() if value is not None})
    options.update(dict(parse_option(item) for item in extra))
    # one console for logs and progress, so log lines print above the live spinner
    console = Console(stderr=True) if sys.stderr.isatty() else None
    ctx = ProbeContext(
        device=resolve_device(device),
        max_memory_fraction=max_memory_fraction,
        timeout_s=timeout_s,
        options=options,
        log=_logger(console),
    )
    return _run_with_progress(ctx, names, console)


def _emit(report: Any, as_json: bool, markdown: bool, output: str | None) -> None:
    """To stdout, or to a file written atomically."""
    from diagnoser.report.probe import render_markdown, render_text

    if as_json:
        text = report.model_dump_json(indent=2) + "\n"
    elif markdown:
        text = render_markdown(report)
    else:
        from diagnoser.report.console import PIPE_WIDTH

        width = shutil.get_terminal_size().columns if sys.stdout.isatty() and not output else PIPE_WIDTH
        text = render_text(report, width)
    if output:
        from diagnoser.fileio import write_atomic

        write_atomic(output, text)
    else:
        click.echo(text, nl=False)


def _run_with_progress(ctx: Any, names: list[str], console: Any | None) -> Any:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from diagnoser.probes.registry import run_probes

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=console, transient=True, disable=console is None,
    ) as progress:
        task = progress.add_task("probes", total=len(names))

        def started(name: str) -> None:
            progress.update(task, description=f"probe {name}")

        def done(result: Any) -> None:
            progress.advance(task)
            level = logging.WARNING if result.status == "failed" else logging.INFO
            ctx.log.log(level, "%s: %s%s (%.1f s)", result.name, result.status, f" - {result.reason}" if result.reason else "", result.duration_s)

        return run_probes(ctx, names, on_start=started, on_done=done)
