"""The fault lab's GPU results in one document: bench_lab's rows, graph replay against eager launches, the traces.

    python bench/lab_device_report.py --device cuda --cases DIR --out DIR [--table FILE ...]
                                      [--trace FILE ...] [--note TEXT ...]

``--cases`` is the folder ``bench/bench_lab.py --cases`` wrote (FAULT.yaml), ``--table`` the
tables it printed (their rows are merged under one header), ``--trace`` the traces
``bench/record_lab_trace.py`` recorded, and each ``--note`` a line saying what the check left out
and why. Writes ``<date>-lab-<card>.md`` and ``.json`` into ``--out`` (the JSON holds every case
whole, to commit beside the Markdown under bench/results/).

Graph replay against eager launches: the healthy server replays a CUDA graph per decode step,
and ``eager-launches`` launches the same static decode function kernel by kernel, so the
difference between their median engine steps (the steps each token's ``server_timing`` stamp
carries, as the client probe read them) is launch cost. Divided by the kernel launches per step
that the eager server's profiled trace counted beyond the healthy one's, it is the cost of one
launch.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import date
from pathlib import Path

from diagnoser.fileio import write_atomic
from diagnoser.models.case import Case, load_case
from diagnoser.trace.analysis import analyze_traces
from diagnoser.trace.facts import to_observations
from diagnoser.trace.kineto import read_kineto


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def step_and_launches(case: Case) -> tuple[float | None, float | None, float | None]:
    """The median engine step (ms), and kernel and graph launches per profiled step."""
    obs = case.observations
    step = obs.boundaries.device_step_ms if obs.boundaries else None
    kernels = obs.graph.kernel_launches_per_step if obs.graph else None
    graphs = obs.graph.graph_launches_per_step if obs.graph else None
    return step, kernels, graphs


def graph_against_eager(cases: dict[str, Case]) -> dict:
    missing = [name for name in ("none", "eager-launches") if name not in cases]
    if missing:
        return {"measured": False, "why": f"no {' or '.join(missing)} case was measured"}
    (graph_ms, graph_kernels, graph_replays), (eager_ms, eager_kernels, eager_replays) = (
        step_and_launches(cases[n]) for n in ("none", "eager-launches"))
    out = {"graph_step_ms": graph_ms, "eager_step_ms": eager_ms, "graph_kernel_launches_per_step": graph_kernels,
           "graph_launches_per_step": graph_replays, "eager_kernel_launches_per_step": eager_kernels,
           "eager_graph_launches_per_step": eager_replays}
    if None in (graph_ms, eager_ms, graph_kernels, eager_kernels) or eager_kernels <= graph_kernels:
        return {"measured": False, "why": "a case lacks its stamped step or its trace's launch counts", **out}
    return {"measured": True, **out, "eager_over_graph": eager_ms / graph_ms,
            "per_launch_us": 1e3 * (eager_ms - graph_ms) / (eager_kernels - graph_kernels)}


def trace_summary(path: Path) -> dict:
    result = analyze_traces([read_kineto(path)])
    facts = to_observations(result)
    summary = {"bytes": path.stat().st_size, "steps": len(result.steps), "segmentation": result.method}
    if facts.budget:
        summary["profiled_step_ms"] = facts.budget.step_ms
    if facts.graph:
        summary["kernel_launches_per_step"] = facts.graph.kernel_launches_per_step
        summary["graph_launches_per_step"] = facts.graph.graph_launches_per_step
    return summary


def bench_rows(tables: list[Path]) -> list[str]:
    """bench_lab's Markdown rows, one header for all of its runs."""
    rows: list[str] = []
    for table in tables:
        lines = [line for line in table.read_text().splitlines() if line.startswith("|")]
        rows += lines if not rows else lines[2:]
    return rows


def figure(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.3f}{unit}"


def markdown(doc: dict) -> str:
    lines = [f"# The fault lab on {doc['card']}, {doc['date']}", "",
             f"torch {doc['torch']}" + (f", CUDA {doc['cuda']}" if doc["cuda"] else "") + f", device `{doc['device']}`; "
             "`bash bench/lab_device_check.sh` (bench/bench_lab.py per fault, bench/record_lab_trace.py, this report).", ""]
    lines += ["## bench_lab", ""] + (doc["bench"] or ["(no fault was measured)"]) + [""]
    g = doc["graph_against_eager"]
    lines += ["## Graph replay against eager launches", ""]
    if "graph_step_ms" in g:
        lines += ["| server | median engine step (ms) | kernel launches per step | graph launches per step |", "|---|---|---|---|",
                  f"| none (graph replay) | {figure(g['graph_step_ms'])} | {figure(g['graph_kernel_launches_per_step'])} | {figure(g['graph_launches_per_step'])} |",
                  f"| eager-launches | {figure(g['eager_step_ms'])} | {figure(g['eager_kernel_launches_per_step'])} | "
                  f"{figure(g['eager_graph_launches_per_step'])} |", ""]
    if g["measured"]:
        lines.append(f"Eager launches take {g['eager_over_graph']:.2f}x the replayed step: {g['per_launch_us']:.2f} us per kernel launch.")
    else:
        lines.append(f"Not measured: {g['why']}.")
    lines += ["", "## Traces", "", "| file | gzipped | steps | profiled step (ms) | kernel launches per step | graph launches per step |",
              "|---|---|---|---|---|---|"]
    for name, t in doc["traces"].items():
        lines.append(f"| `{name}` | {t['bytes'] / 1e6:.2f} MB | {t['steps']} ({t['segmentation']}) | {figure(t.get('profiled_step_ms'))} | "
                     f"{figure(t.get('kernel_launches_per_step'))} | {figure(t.get('graph_launches_per_step'))} |")
    if doc["notes"]:
        lines += ["", "## Left out", ""] + [f"- {note}" for note in doc["notes"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--cases", type=Path, required=True, help="the folder bench_lab.py --cases wrote")
    parser.add_argument("--table", type=Path, action="append", default=[], help="a table bench_lab.py printed")
    parser.add_argument("--trace", type=Path, action="append", default=[], help="a trace record_lab_trace.py wrote")
    parser.add_argument("--note", action="append", default=[], help="what the check left out, and why")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import torch

    card = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    cases = {path.stem: load_case(path) for path in sorted(args.cases.glob("*.yaml"))}
    doc = {
        "date": date.today().isoformat(), "device": args.device, "card": card, "torch": torch.__version__, "cuda": torch.version.cuda,
        "bench": bench_rows([t for t in args.table if t.exists()]),
        "graph_against_eager": graph_against_eager(cases),
        "traces": {t.name: trace_summary(t) for t in args.trace if t.exists()},
        "notes": args.note,
        "cases": {name: case.model_dump(mode="json", exclude_none=True) for name, case in cases.items()},
    }
    stem = args.out / f"{doc['date']}-lab-{slug(card)}"
    write_atomic(stem.with_suffix(".json"), json.dumps(doc, indent=2) + "\n")
    write_atomic(stem.with_suffix(".md"), markdown(doc))
    print(markdown(doc), end="")
    print(f"wrote {stem}.md and {stem}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
