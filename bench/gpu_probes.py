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
import json
import re
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from diagnoser.fileio import write_atomic
from diagnoser.probes.base import ProbeContext
from diagnoser.probes.registry import run_probes
from diagnoser.probes.report import ProbeReport

BANDWIDTH_GOAL = 0.95


def card_name(report: ProbeReport) -> str:
    device, _ = ok_facts(report, "device")
    if device and device.get("devices"):
        return device["devices"][0]["name"]
    gemm, _ = ok_facts(report, "gemm")
    return (gemm or {}).get("device_name") or "cpu"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _pct(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "n/a"


def ok_facts(report: ProbeReport, name: str) -> tuple[dict[str, Any] | None, str]:
    """The probe's facts when it succeeded, else None and a line saying what happened."""
    result = report.result(name)
    if result is None:
        return None, f"{name} probe: not run"
    if result.status != "ok":
        return None, f"{name} probe: {result.status} ({result.reason})"
    return result.facts, ""


def bandwidth_lines(report: ProbeReport) -> list[str]:
    f, why = ok_facts(report, "bandwidth")
    if f is None:
        return [why]
    verdict = "PASS" if f["fraction_of_best_torch_copy"] >= BANDWIDTH_GOAL else "FAIL"
    return [
        f"buffer {f['buffer_bytes'] / 2**20:.0f} MiB per side ({f['buffer_over_cache'] or 0:.1f}x the last-level cache), float32",
        f"read {f['read_gbs']:.1f} GB/s, copy {f['copy_gbs']:.1f} GB/s (read + write counted)",
        f"probe figure {f['measured_bandwidth_gbs']:.1f} GB/s = {_pct(f['fraction_of_best_torch_copy'])} of the best torch copy "
        f"({f['best_torch_copy_gbs']:.1f} GB/s, {f['best_torch_copy_variant']}): {verdict} (goal >= {BANDWIDTH_GOAL:.0%})",
        f"theoretical {f['theoretical_bandwidth_gbs'] or 'n/a'} GB/s ({f['theoretical_source']}), "
        f"achieved {_pct(f['fraction_of_theoretical'])}",
    ]


def graph_table(report: ProbeReport) -> list[str]:
    f, why = ok_facts(report, "graphs")
    if f is None:
        return [why]
    rows = [
        f"{f['layers']} layers, hidden {f['hidden']}, {f['dtype']}; mode: {f['mode']}",
        "",
        "| batch | launches/step | eager ms | graph ms | gain | launch cost us | replay matches eager |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in f["batches"]:
        graph_ms = f"{p['graph_step_ms']:.3f}" if "graph_step_ms" in p else p.get("capture_error", "eager only")
        gain = f"{p['graph_gain']:.2f}x" if "graph_gain" in p else "n/a"
        cost = f"{p['launch_cost_us']:.2f}" if "launch_cost_us" in p else "n/a"
        rows.append(
            f"| {p['batch']} | {p['launches_per_step']} | {p['eager_step_ms']:.3f} | {graph_ms} | {gain} | {cost} | {p.get('replay_matches_eager', 'n/a')} |"
        )
    return rows


def gemm_table(report: ProbeReport) -> list[str]:
    f, why = ok_facts(report, "gemm")
    if f is None:
        return [why]
    peaks = ", ".join(f"{d} {t:g}" for d, t in (f["peak_tflops"] or {}).items()) or "n/a"
    rows = [
        f"shapes from {f['shapes_source']}; swept {', '.join(f['dtypes'])}; peak TFLOP/s: {peaks}; "
        f"{f['peak_bandwidth_gbs'] or 'n/a'} GB/s ({f['hardware'] or 'no preset'}){'; scaled for CPU' if f['scaled_for_cpu'] else ''}"
    ]
    rows += [f"- {d} not swept: {why}" for d, why in f["dtypes_skipped"].items()]
    rows += [f"- {s['name']} in {s['dtype']} not swept: {s['reason']}" for s in f["skipped"]]
    for shape in f["shapes"]:
        rows += [
            "",
            f"**{shape['name']}, {shape['dtype']}**: N={shape['n']} K={shape['k']}, {shape['weight_copies']} weight copies; "
            f"time doubles at M={shape['m_doubling_time_at']}",
            "",
            "| M | time us | TFLOP/s | GB/s | % peak FLOP/s | % peak BW | % roofline |",
            "|---|---|---|---|---|---|---|",
        ]
        for p in shape["points"]:
            rows.append(
                f"| {p['m']} | {p['time_us']:.1f} | {p['tflops']:.2f} | {p['gbs']:.0f} | {_pct(p.get('fraction_of_peak_flops'))} "
                f"| {_pct(p.get('fraction_of_peak_bandwidth'))} | {_pct(p.get('fraction_of_roofline'))} |"
            )
    return rows


def render_markdown(report: ProbeReport, card: str, wall_s: float) -> str:
    lines = [
        f"# GPU probes on {card}, {report.created[:10]}",
        "",
        f"host {report.host}, torch {report.torch_version}, all probes in {wall_s:.0f} s "
        "(`python bench/gpu_probes.py`)",
        "",
        "| probe | status | seconds | reason |",
        "|---|---|---|---|",
        *[f"| {r.name} | {r.status} | {r.duration_s:.1f} | {r.reason or ''} |" for r in report.results],
        "",
        "## Bandwidth",
        "",
        *[f"- {line}" for line in bandwidth_lines(report)],
        "",
        "## Eager launches vs CUDA graph replay",
        "",
        *graph_table(report),
        "",
        "## Expert GEMM sweep",
        "",
        *gemm_table(report),
    ]
    return "\n".join(lines) + "\n"


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
    for line in bandwidth_lines(report):
        print(line)
    stem = Path(args.out) / f"{date.today().isoformat()}-{slug(card)}"
    write_atomic(stem.with_suffix(".json"), json.dumps(report.model_dump(mode="json"), indent=2) + "\n")
    write_atomic(stem.with_suffix(".md"), render_markdown(report, card, wall))
    print(f"wrote {stem}.md and {stem}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
