"""Run every probe on this machine and record the GPU acceptance figures.

Prints the bandwidth probe's figure as a fraction of the best plain torch device-to-device
copy measured in the same run (the goal is >= 95%), and writes the eager-versus-graph gain and
the GEMM sweep table to ``<out>/<date>-<card>.md`` and ``.json`` (the full probe report).

Usage: python bench/gpu_probes.py [--out bench/results] [--device auto|cuda|cpu] [--model deepseek-v3]
       [--timeout 120]

Made for an H200 (all probes within 5 minutes); it runs on a CPU too, as a smoke test of the
same code paths (graphs eager only, GEMM shapes scaled down). The machine needs the diagnoser
package importable with its pure-Python dependencies (pydantic, click, rich, PyYAML, orjson,
httpx) besides torch and nvidia-ml-py.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from diagnoser.fileio import write_atomic
from diagnoser.models.probe_report import ProbeReport
from diagnoser.probes.base import ProbeContext
from diagnoser.probes.registry import run_probes
from diagnoser.report.probe import render_markdown

BANDWIDTH_GOAL = 0.95


def card_name(report: ProbeReport) -> str:
    device = report.ok_facts("device")
    if device and device.devices and device.devices[0].name:
        return device.devices[0].name
    gemm = report.ok_facts("gemm")
    return (gemm.device_name if gemm else None) or "cpu"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def goal_line(report: ProbeReport) -> str:
    """The acceptance figure: the probe's bandwidth against the best plain torch copy of this run."""
    f = report.ok_facts("bandwidth")
    if f is None:
        result = report.result("bandwidth")
        return f"bandwidth probe: {result.status} ({result.reason})" if result else "bandwidth probe: not run"
    verdict = "PASS" if f.fraction_of_best_torch_copy >= BANDWIDTH_GOAL else "FAIL"
    return (
        f"bandwidth {f.measured_bandwidth_gbs:.1f} GB/s = {100 * f.fraction_of_best_torch_copy:.1f}% of the best torch copy "
        f"({f.best_torch_copy_gbs:.1f} GB/s): {verdict} (goal >= {BANDWIDTH_GOAL:.0%})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--model", default=None, help="model whose expert shapes the GEMM sweep uses")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per probe")
    args = parser.parse_args(argv)

    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    options: dict[str, Any] = {"ranks": max(2, torch.cuda.device_count()) if device == "cuda" else 2}
    if args.model:
        options["model"] = args.model
    ctx = ProbeContext(device=device, timeout_s=args.timeout, options=options)
    start = time.perf_counter()
    report = run_probes(ctx, on_done=lambda r: print(f"{r.name:14s} {r.status:8s} {r.duration_s:6.1f} s  {r.reason or ''}", flush=True))
    wall = time.perf_counter() - start
    card = card_name(report)
    print(f"all probes: {wall:.1f} s on {card} ({device})")
    goal = goal_line(report)
    print(goal)
    stem = Path(args.out) / f"{date.today().isoformat()}-{slug(card)}"
    write_atomic(stem.with_suffix(".json"), report.model_dump_json(indent=2) + "\n")
    notes = (f"all probes in {wall:.0f} s (`python bench/gpu_probes.py`)", goal)
    write_atomic(stem.with_suffix(".md"), render_markdown(report, f"GPU probes on {card}, {report.created[:10]}", notes))
    print(f"wrote {stem}.md and {stem}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
