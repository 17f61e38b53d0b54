"""`diagnoser probe`: measure this machine and print one report (or fold it into a case).

stdout carries only the result (the JSON document with ``--json``, Markdown with
``--markdown``, else the status table and each probe's figures) so scripts can pipe it; logs
and the progress display go to stderr, and only when a person is watching.
"""

from __future__ import annotations

import logging
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from diagnoser.cli.params import Number
from diagnoser.errors import InputError

MAX_TIMEOUT_S = 86_400.0  # a day; far larger waits overflow the thread join that enforces it


def _refuse_odd_numbers(flag: str, value: Any) -> None:
    """No NaN, infinity or negative number anywhere in an option value: no probe option takes one."""
    if isinstance(value, bool):
        return
    not_finite = isinstance(value, float) and not math.isfinite(value)
    if not_finite or (isinstance(value, (int, float)) and value < 0):
        raise InputError(f"{flag}: {value!r} is not a finite, non-negative number")
    if isinstance(value, dict):
        value = list(value.values())
    for item in value if isinstance(value, list) else ():
        _refuse_odd_numbers(flag, item)


def _only(text: str | None) -> list[str] | None:
    """The probes ``--only`` names; given but naming none (``--only ""``) is a mistake, not "all"."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise InputError("--only: name at least one probe (device,bandwidth,gemm,graphs,collectives,client,context_sweep)")
    return names


def parse_option(text: str) -> tuple[str, Any]:
    """KEY=VALUE, the value read as YAML so numbers and lists arrive typed ('batch_sizes=[1,8]')."""
    from diagnoser.models.documents import NotYaml, parse_yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise InputError(f"--option: expected KEY=VALUE, got {text!r}")
    try:
        parsed = parse_yaml(value, f"--option {key.strip()}", "an option value") if value.strip() else None
    except NotYaml:
        raise InputError(f"--option {key.strip()}: cannot read value {value[:80]!r}") from None
    _refuse_odd_numbers(f"--option {key.strip()}", parsed)
    return key.strip(), parsed


def workload_options(case_path: str) -> dict[str, Any]:
    """Probe options implied by the case's workload: model, expert sharding, hardware, local batch."""
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
@click.option(
    "--case", "case_path", metavar="FILE",
    help="read the workload from this case and merge the results into a copy of it (NAME.probed.yaml; the case itself is never rewritten)",
)  # fmt: skip
@click.option(
    "--case-out", metavar="FILE",
    help="where the merged case goes (default: NAME.probed.yaml beside --case, or --case itself when it does not exist yet)",
)  # fmt: skip
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True, help="where the torch probes run")
@click.option(
    "--timeout", "timeout_s", type=Number(float, 1, MAX_TIMEOUT_S), default=60.0, show_default=True, help="seconds allowed per probe"
)  # fmt: skip
@click.option(
    "--max-memory-fraction", type=Number(float, 0.01, 0.9), default=0.25, show_default=True,
    help="largest share of free memory a probe may take",
)  # fmt: skip
@click.option("--endpoint", help="OpenAI-compatible server for the client and context probes, e.g. http://127.0.0.1:8000")
@click.option("--model-name", help="model name to send to the endpoint")
@click.option("--model", help="model whose expert shapes the GEMM sweep uses (preset or config.json); default: the case's")
@click.option("--hardware", help="hardware preset for peak figures (default: the case's, else matched from the device name)")
@click.option("--expert-tp", type=Number(int, 1), help="shards per expert, for the GEMM shapes")
@click.option("--ranks", type=Number(int, 2), help="processes for the collectives probe")
@click.option("--delay-rank", type=Number(int, 0), help="collectives: rank that sleeps before each collective")
@click.option("--delay-ms", type=Number(float, 0), help="collectives: how long that rank sleeps, ms")
@click.option("--option", "extra", multiple=True, metavar="KEY=VALUE", help="any other probe option, repeatable (value read as YAML)")
@click.option(
    "--probe-report", metavar="FILE",
    help="run nothing: read a saved probe --json report (to print it, or merge it into --case)",
)  # fmt: skip
def probe(
    only: str | None,
    as_json: bool,
    markdown: bool,
    output: str | None,
    case_path: str | None,
    case_out: str | None,
    probe_report: str | None,
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
    from diagnoser.fileio import check_outputs, merged_case_path

    if as_json and markdown:
        raise InputError("--json and --markdown: choose one output format")
    if case_out and not case_path:
        raise InputError("--case-out: give --case too (the case the results are merged into)")
    given = dict(parse_option(item) for item in extra)
    merged_path = merged_case_path(case_path, "probed", case_out) if case_path else None
    # a case that does not exist yet is an output only; a --model that names a file is an input
    inputs = [p for p in (case_path, flags["model"]) if p and Path(p).exists()] + ([probe_report] if probe_report else [])
    check_outputs([("-o", output), ("--case-out" if case_out else "--case", merged_path)], inputs)
    if probe_report:
        from diagnoser.models.probe_report import load_report

        report = load_report(probe_report)
    else:
        report = _measure(only, case_path, device, timeout_s, max_memory_fraction, given, flags)
    if case_path:
        _write_merged(case_path, merged_path, report)
    _emit(report, as_json, markdown, output)


def _write_merged(case_path: str, merged_path: Path, report: Any) -> None:
    """The merged case to its own file, and one line on stderr saying where (or why nowhere)."""
    from diagnoser.probes.to_case import merged_case, write_case

    merged = merged_case(case_path, report)
    if merged is None:
        click.echo(f"diagnoser: no successful probe measured anything a case holds; {merged_path} not written", err=True)
        return
    write_case(merged_path, merged)
    if merged_path == Path(case_path):  # merged_case_path names the case itself only when there was none
        click.echo(f"diagnoser: wrote the probe results to a new case {merged_path}", err=True)
    else:
        click.echo(f"diagnoser: merged the probe results into {merged_path} ({case_path} unchanged)", err=True)


def _measure(
    only: str | None, case_path: str | None, device: str, timeout_s: float, max_memory_fraction: float,
    given: dict[str, Any], flags: dict[str, Any],
) -> Any:
    """Run the chosen probes with the options the case, the flags and --option give (in that order)."""
    from rich.console import Console

    from diagnoser.probes.base import ProbeContext
    from diagnoser.probes.registry import select

    names = select(_only(only))
    options: dict[str, Any] = workload_options(case_path) if case_path else {}
    options.update({key: value for key, value in flags.items() if value is not None})
    options.update(given)
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
