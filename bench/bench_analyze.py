"""Bench: ``diagnoser analyze`` against HTA (holistictraceanalysis) on the same traces.

    .venv/bin/pip install holistictraceanalysis      # bench-only, never a runtime dependency
    .venv/bin/python bench/bench_analyze.py [--out bench/out] [--skip-big]

Prints, per trace set: wall time and peak memory (RSS of the whole process tree, sampled)
of each tool in its own fresh process, the ratios, and analyze time over the time a plain
orjson parse of the same bytes takes. The big set is 8 ranks built from the shared CUDA-graph
training trace: each rank is that trace repeated twice in time (steps renamed, correlation ids
moved) with its own ``distributedInfo.rank``, about 50 MB of JSON per rank.
Figures vary with load: the machine is shared, so run it when it is quiet and read the min.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"

HTA_RUN = """
import sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(visualize=False)
a.get_cuda_kernel_launch_stats(visualize=False)
a.get_comm_comp_overlap(visualize=False)
print(t - t0, time.perf_counter() - t)
"""

DIAGNOSER_RUN = """
import sys, time
t0 = time.perf_counter()
from diagnoser.trace.load import load_traces
from diagnoser.trace.analysis import analyze_traces
from diagnoser.trace.facts import to_observations
t = time.perf_counter()
to_observations(analyze_traces(load_traces([sys.argv[1]])))
print(t - t0, time.perf_counter() - t)
"""


def run_measured(code: str, trace_dir: Path) -> tuple[float, float, float]:
    """(import seconds, work seconds, peak RSS in MB of the child and its workers together)."""
    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(trace_dir)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    root = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [root] + root.children(recursive=True)
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.02)
    out = proc.stdout.read().strip().splitlines()
    if proc.returncode != 0 or not out:
        raise SystemExit(f"bench child failed on {trace_dir} (exit {proc.returncode})")
    import_s, work_s = (float(x) for x in out[-1].split())
    return import_s, work_s, peak / 2**20


def plain_parse_seconds(trace_dir: Path) -> float:
    """Reading, gunzipping and orjson-parsing the same files, nothing else."""
    from diagnoser.trace.kineto import read_bytes

    t = time.perf_counter()
    for path in sorted(trace_dir.iterdir()):
        orjson.loads(read_bytes(path))
    return time.perf_counter() - t


def build_big_set(out: Path, ranks: int = 8, copies: int = 2) -> Path:
    """8 ranks of ~50 MB JSON from the shared CUDA-graph trace (rank and rank-regex friendly)."""
    target = out / "big8"
    if target.is_dir() and len(list(target.glob("rank-*.json"))) == ranks:
        return target
    target.mkdir(parents=True, exist_ok=True)
    with gzip.open(SHARED / "hta" / "negative_queue_length_values_check" / "rank0.json.gz") as handle:
        src = orjson.loads(handle.read())
    events = src["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    repeated = []
    for k in range(copies):
        for e in events:
            if k and e.get("ph") == "M":
                continue
            e2 = dict(e)
            if isinstance(e2.get("ts"), (int, float)):
                e2["ts"] = e2["ts"] + k * span
            if isinstance(e2.get("args"), dict):
                args = dict(e2["args"])
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int) and args[key] > 0:
                        args[key] += k * 10_000_000
                e2["args"] = args
            if "id" in e2 and isinstance(e2["id"], int):
                e2["id"] += k * 10_000_000
            name = e2.get("name", "")
            if k and isinstance(name, str) and name.startswith("ProfilerStep#"):
                e2["name"] = f"ProfilerStep#{int(name.split('#')[1]) + 100 * k}"
            repeated.append(e2)
    body = orjson.dumps(repeated)
    for rank in range(ranks):
        head = {key: value for key, value in src.items() if key != "traceEvents"}
        head["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": ranks}
        prefix = json.dumps(head)[:-1].encode() + b', "traceEvents": '  # json.dumps keeps '"rank": N' spaced for HTA
        (target / f"rank-{rank}.json").write_bytes(prefix + body + b"}")
    return target


def bench(name: str, trace_dir: Path) -> None:
    size = sum(p.stat().st_size for p in trace_dir.iterdir()) / 1e6
    ours_imp, ours_s, ours_mb = run_measured(DIAGNOSER_RUN, trace_dir)
    hta_imp, hta_s, hta_mb = run_measured(HTA_RUN, trace_dir)
    parse_s = plain_parse_seconds(trace_dir)
    print(f"{name}: {len(list(trace_dir.iterdir()))} files, {size:.1f} MB on disk")
    print(f"  diagnoser analyze: {ours_s:.2f} s (+{ours_imp:.2f} s imports), peak {ours_mb:.0f} MB")
    print(f"  HTA load + 4 analyses: {hta_s:.2f} s (+{hta_imp:.2f} s imports), peak {hta_mb:.0f} MB")
    print(
        f"  speed-up vs HTA: {hta_s / ours_s:.1f}x without imports, {(hta_s + hta_imp) / (ours_s + ours_imp):.1f}x with "
        f"(goal >= 5x); peak memory vs HTA: {ours_mb / hta_mb:.2f} (goal <= 0.33)"
    )
    print(f"  plain read+parse (one process): {parse_s:.2f} s; analyze / parse = {ours_s / parse_s:.2f} (goal <= 2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--skip-big", action="store_true", help="only the 2-rank trace_filter set")
    args = parser.parse_args()
    bench("trace_filter (2 ranks)", SHARED / "hta" / "trace_filter")
    if not args.skip_big:
        bench("generated 8-rank set", build_big_set(args.out))


if __name__ == "__main__":
    main()
