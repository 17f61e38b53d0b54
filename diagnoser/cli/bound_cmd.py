"""`diagnoser bound`: the per-rank decode bound for a pinned workload."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from diagnoser.cli.params import Number
from diagnoser.cli.report_output import emit, output_option
from diagnoser.errors import InputError

_SI = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_quantity(text: str, what: str) -> float:
    """'10GB', '10e9', '2T' -> float, decimal prefixes (the reference's units)."""
    match = re.fullmatch(r"\s*([0-9.]+(?:e[+-]?\d+)?)\s*([kmgtp]?)(?:b|b/s|/s)?\s*", text.lower())
    value = float(match.group(1)) * _SI[match.group(2)] if match else math.nan
    if not 0 < value < math.inf:
        raise InputError(f"{what}: cannot read {text!r} as a positive, finite quantity (e.g. 10GB, 2e12)")
    return value


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    if value is None:
        return
    node = doc
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise InputError(f"workload: {key} must be a mapping to set {path}")
    node[leaf] = value


@click.command()
@click.argument("workload_file", required=False, type=click.Path(dir_okay=False))
@click.option("--model", help="preset name or path to a Hugging Face config.json")
@click.option("--hardware", help="hardware preset (h100-sxm, h100-pcie, h100-nvl, h200, h200-nvl, a100-80gb, a100-80gb-pcie, a100-40gb, b200, mi300x)")
@click.option("--batch", type=Number(int, 1), help="sequences decoding together across the group")
@click.option("--context", type=Number(float, 0), help="mean context length of the sequences, tokens")
@click.option("--tp", type=Number(int, 1), help="tensor-parallel ranks")
@click.option("--ep", type=Number(int, 1), help="expert-parallel ranks")
@click.option("--pp", type=Number(int, 1), help="pipeline stages")
@click.option("--dp", type=Number(int, 1), help="data-parallel attention ranks")
@click.option("--expert-tp", type=Number(int, 1), help="shards per expert (default: TP when EP=1, else 1)")
@click.option("--weights", help="storage format of dense weights (bf16, fp8, int4, nvfp4, ...)")
@click.option("--expert-weights", help="storage format of expert weights")
@click.option("--kv-cache", help="storage format of the KV cache")
@click.option("--tokens-per-step", type=Number(float, 0), help="tokens emitted per sequence per step")
@click.option("--bandwidth", "bandwidth", help="memory bandwidth, e.g. 3.35TB/s or 3350GB/s (default: preset or measured)")
@click.option("--probe-report", "probe_file", type=click.Path(dir_okay=False), help="use the GPU bandwidth in a report saved by `diagnoser probe --json`")
@click.option("--bytes-per-step", help="skip the model: a single rank moving this many bytes (e.g. 10GB)")
@click.option("--observed-step-ms", type=Number(float, 0), help="measured time per decode step, ms")
@click.option("--observed-tokens-per-s", type=Number(float, 0), help="measured aggregate tokens/s over the group")
@click.option("--boundary", type=click.Choice(["device_step", "server_emission", "client_receipt"]), help="where the observation was read")
@click.option("--json", "as_json", is_flag=True, help="print the full report as JSON")
@output_option
def bound(
    workload_file: str | None, as_json: bool, bytes_per_step: str | None, bandwidth: str | None,
    probe_file: str | None, output: Path | None, **flags: Any,
) -> None:
    """Bytes each rank moves per decode step, the floor they imply, and what it leaves out.

    Give a workload file (YAML/JSON), or a case file whose workload: section pins the work,
    and/or flags; flags override the file. With
    --bytes-per-step and --bandwidth, compute the single-rank floor from those figures alone.
    """
    from diagnoser.fileio import check_outputs

    check_outputs([("-o", output)], [p for p in (workload_file, probe_file, flags["model"]) if p])
    observed = {"step_ms": flags["observed_step_ms"], "tokens_per_s": flags["observed_tokens_per_s"]}
    if probe_file is not None:
        if bandwidth is not None:
            raise InputError("give --bandwidth or --probe-report, not both")
        bandwidth = f"{measured_gpu_bandwidth_gbs(probe_file)}GB/s"
    if bytes_per_step is not None:
        result, render = _synthetic(bytes_per_step, bandwidth, flags, observed)
    else:
        result, render = _pinned(workload_file, flags, observed, bandwidth)
    if as_json:
        emit(result.model_dump_json(indent=2), output)
        return
    from diagnoser.report.console import stdout_console, text_console

    if output is None:
        render(stdout_console())
    else:
        console = text_console()
        render(console)
        emit(console.file.getvalue(), output)


def _pinned(workload_file: str | None, flags: dict[str, Any], observed: dict[str, Any], bandwidth: str | None) -> tuple[Any, Callable]:
    doc = _workload_document(workload_file, flags, observed, bandwidth)
    from pydantic import ValidationError

    from diagnoser.bound import compute_bound
    from diagnoser.models.documents import validation_message
    from diagnoser.models.workload import Workload

    try:
        workload = Workload.model_validate(doc)
    except ValidationError as err:
        raise InputError(validation_message(err, workload_file or "workload", Workload)) from None
    report = compute_bound(workload)
    from diagnoser.report.bound import render_bound

    return report, functools.partial(render_bound, report)


def measured_gpu_bandwidth_gbs(path: str) -> float:
    """The HBM bandwidth a probe run measured; a host-memory figure would make a GPU bound wrong."""
    from diagnoser.models.probe_report import load_report

    report = load_report(path)
    result = report.result("bandwidth")
    if result is None or result.status != "ok":
        why = f": {result.reason}" if result and result.reason else ""
        raise InputError(f"{path}: no successful bandwidth probe in this report{why}")
    if result.facts.device != "cuda":
        raise InputError(f"{path}: the bandwidth probe measured {result.facts.device} memory, not GPU HBM")
    return float(result.facts.measured_bandwidth_gbs)


def _workload_document(path: str | None, flags: dict[str, Any], observed: dict[str, Any], bandwidth: str | None) -> dict[str, Any]:
    from diagnoser.models.documents import load_document

    doc: dict[str, Any] = {}
    if path:
        loaded = load_document(path)
        if not isinstance(loaded, dict):
            raise InputError(f"{path}: expected a mapping at the top level")
        doc = loaded
        if "model" not in doc and {"workload", "observations"} & doc.keys():
            # a case file: its pin is the workload section
            if not isinstance(doc.get("workload"), dict):
                raise InputError(f"{path}: a case without a workload: section (pin the model, hardware, batch and context there)")
            doc = doc["workload"]
    elif not flags["model"]:
        raise InputError("give a workload file, --model, or --bytes-per-step with --bandwidth")
    for key, path_in_doc in [
        ("model", "model"), ("hardware", "hardware"), ("batch", "batch"), ("context", "context"),
        ("tp", "layout.tp"), ("ep", "layout.ep"), ("pp", "layout.pp"), ("dp", "layout.dp"),
        ("expert_tp", "layout.expert_tp"), ("weights", "precision.weights"),
        ("expert_weights", "precision.expert_weights"), ("kv_cache", "precision.kv_cache"),
        ("tokens_per_step", "tokens_per_step"),
    ]:
        _set(doc, path_in_doc, flags[key])
    if bandwidth is not None:
        doc["measured_bandwidth_gbs"] = parse_quantity(bandwidth, "--bandwidth") / 1e9
    if observed["step_ms"] is not None or observed["tokens_per_s"] is not None:
        doc["observed"] = {k: v for k, v in observed.items() if v is not None}
    _set(doc, "observed.boundary", flags["boundary"])
    return doc


def _synthetic(bytes_text: str, bandwidth: str | None, flags: dict[str, Any], observed: dict[str, Any]) -> tuple[Any, Callable]:
    from diagnoser.bound import floor_from_bytes
    from diagnoser.models.workload import Boundary

    if bandwidth is None:
        raise InputError("--bytes-per-step needs --bandwidth (e.g. --bandwidth 2TB/s)")
    nbytes = parse_quantity(bytes_text, "--bytes-per-step")
    bw_gbs = parse_quantity(bandwidth, "--bandwidth") / 1e9
    if nbytes <= 0 or bw_gbs <= 0:
        raise InputError("--bytes-per-step and --bandwidth must be positive")
    for name, value in observed.items():
        if value is not None and value <= 0:
            raise InputError(f"observed {name} must be positive")
    batch = flags["batch"] or 1
    if batch < 1:
        raise InputError("--batch must be at least 1")
    if not 0 < nbytes / (bw_gbs * 1e9) < math.inf:
        raise InputError(f"--bytes-per-step {bytes_text} over --bandwidth {bandwidth} is no real step time; check the units")
    result = floor_from_bytes(
        nbytes, bw_gbs, tokens_per_step=flags["tokens_per_step"] or 1.0, batch=batch,
        observed_step_ms=observed["step_ms"], observed_tokens_per_s=observed["tokens_per_s"],
        boundary=Boundary(flags["boundary"] or "device_step"),
    )
    from diagnoser.report.bound import render_floor

    return result, lambda console: render_floor(result, nbytes, bw_gbs, console)
