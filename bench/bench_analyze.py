"""Bench: ``diagnoser analyze`` against HTA (holistictraceanalysis) on the same traces.

    .venv/bin/pip install holistictraceanalysis      # bench-only, never a runtime dependency
    .venv/bin/python bench/bench_analyze.py [--out bench/out] [--skip-big]
    .venv/bin/python bench/bench_analyze.py --scale [--scratch /tmp]       # issue #28's acceptance sets
    .venv/bin/python bench/bench_analyze.py --scale --kernels 1000000      # its two kernel-counted sets, smaller
    .venv/bin/python bench/bench_analyze.py --scale --sizes 100,300 [--ranks 2] [--scratch /tmp]
    .venv/bin/python bench/bench_analyze.py --start [--hta-python /path/to/hta-venv/bin/python]

Prints, per trace set: wall time and peak memory (RSS of the whole process tree, sampled)
of each tool in its own fresh process, the ratios, and analyze time over the time a plain
orjson parse of the same bytes takes. The big set is 8 ranks built from the shared CUDA-graph
training trace: each rank is that trace repeated twice in time (steps renamed, correlation ids
moved) with its own ``distributedInfo.rank``, about 50 MB of JSON per rank.
Figures vary with load: the machine is shared, so run it when it is quiet and read the min.

``--scale`` writes issue #28's sets, one at a time, and deletes each after: a Kineto rank of 10 M
kernels (CUDA-graph decode steps, about 3 GB), two eager ranks of 1 GB each, and a 5 M-kernel
Nsight export; it prints a table of diagnoser's time and peak RSS against the parse-only floor
(an orjson stream-parse of the JSON, or every row of the export's tables streamed from SQLite).
``--scale --kernels N`` writes the CUDA-graph rank with N kernels and the export with N / 2 instead,
and not the 1 GB ranks: the same shapes at a size one can iterate on (a minute at 10^6).
``--scale --sizes`` writes eager kernel-dense Kineto traces of the sizes given instead (MB of JSON;
100 kernels and their launches per ProfilerStep, one all-reduce, a D2H copy and a sync, as a
decode step has), streamed to disk and deleted after each.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
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
to_observations(analyze_traces(load_traces([sys.argv[1]]), keep_segments=False))  # as `analyze` without --perfetto
print(t - t0, time.perf_counter() - t)
"""


STREAM_PARSE_RUN = """
import sys, time
from pathlib import Path
t0 = time.perf_counter()
from diagnoser.trace.chunked_json import event_pieces
from diagnoser.trace.trace_file import open_stream
t = time.perf_counter()
given = Path(sys.argv[1])
for path in sorted(given.iterdir()) if given.is_dir() else [given]:
    with open_stream(path) as stream:
        for _ in event_pieces(stream):
            pass
print(t - t0, time.perf_counter() - t)
"""

# The floor of reading an Nsight export: every row of the tables the reader reads, streamed.
SQLITE_PARSE_RUN = """
import sqlite3, sys, time
sys.path.insert(0, "bench")
t0 = time.perf_counter()
from bench_nsys_sqlite import TABLES
t = time.perf_counter()
db = sqlite3.connect(sys.argv[1])
for table in TABLES:
    for _ in db.execute(f"SELECT * FROM {table}"):
        pass
print(t - t0, time.perf_counter() - t)
"""


def _tree_rss(root: int) -> int:
    """Resident bytes of a process and all its descendants, from /proc (Linux)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, frontier = {root}, [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier and pid not in tree]
        tree.update(frontier)
    total = 0
    for pid in tree:
        try:
            total += int((Path("/proc") / str(pid) / "statm").read_text().split()[1]) * 4096
        except (OSError, IndexError, ValueError):
            pass
    return total


# Children keep compiled bytecode, as an installed package does (pip compiles it at install time), in a
# folder of their own: where PYTHONDONTWRITEBYTECODE is set, an editable checkout would otherwise compile
# every module on every start, which HTA's installed files never do. The first of several runs warms it.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {
    "PYTHONPYCACHEPREFIX": str(Path(tempfile.gettempdir()) / "bench-analyze-pycache")
}


def _watch(command: list[str]) -> tuple[subprocess.Popen, float, int]:
    """Run ``command`` to its end: (the process, wall seconds, peak RSS bytes of its tree, sampled)."""
    t = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO, env=CHILD_ENV)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        time.sleep(0.01)
    return proc, time.perf_counter() - t, peak


def run_measured(code: str, trace_dir: Path, python: str = sys.executable) -> tuple[float, float, float]:
    """(import seconds, work seconds, peak RSS in MB of the child and its workers together, sampled)."""
    proc, _, peak = _watch([python, "-c", code, str(trace_dir)])
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


# What any `analyze` process pays before it reads a byte: the interpreter, numpy, click, orjson, and
# pydantic with its first model built (pydantic's one-time set-up comes with the first model class).
FLOOR_RUN = """
import numpy, click, orjson
from pydantic import BaseModel
class First(BaseModel):
    x: int = 0
"""


def start_to_end(hta_python: str, repeat: int) -> None:
    """Each of HTA's test traces both tools read, as whole processes: ``diagnoser analyze --json``
    against HTA's load and four analyses, best of ``repeat``: on small traces starting is the cost.
    First the floor: a process that only imports what ``analyze`` cannot do without."""
    floor = min(_watch([sys.executable, "-c", FLOOR_RUN])[1] for _ in range(repeat))
    print(f"floor (python, numpy, click, orjson, pydantic's first model): {floor:.2f} s", flush=True)
    hta_data = SHARED / "hta"
    traces = sorted(p for p in hta_data.rglob("*.json.gz"))
    runs = {}
    for trace in traces:
        folder = trace.parent if trace.parent.name == "trace_filter" else trace
        runs.setdefault(folder, None)
    for target in runs:
        with tempfile.TemporaryDirectory() as scratch:
            trace_dir = target if target.is_dir() else Path(scratch)
            if not target.is_dir():
                (trace_dir / target.name).symlink_to(target)
            ours = [_watch([sys.executable, "-m", "diagnoser", "analyze", "--json", str(target)]) for _ in range(repeat)]
            hta = [_watch([hta_python, "-c", HTA_RUN, str(trace_dir)]) for _ in range(repeat)]
        name = target.relative_to(hta_data)
        if any(proc.returncode for proc, _, _ in hta):
            print(f"{name}: HTA cannot read it; diagnoser {min(w for _, w, _ in ours):.2f} s")
            continue
        if any(proc.returncode for proc, _, _ in ours):
            print(f"{name}: diagnoser refuses it (exit {ours[0][0].returncode}); HTA {min(w for _, w, _ in hta):.2f} s")
            continue
        ours_s, hta_s = min(w for _, w, _ in ours), min(w for _, w, _ in hta)
        print(f"{name}: diagnoser {ours_s:.2f} s, peak {max(p for *_, p in ours) / 2**20:.0f} MB; HTA {hta_s:.2f} s, "
              f"peak {max(p for *_, p in hta) / 2**20:.0f} MB; HTA / diagnoser = {hta_s / ours_s:.1f}x (goal >= 5x; "
              f"HTA / floor = {hta_s / floor:.1f}x)", flush=True)


def bench(name: str, trace_dir: Path, hta_python: str = sys.executable) -> None:
    size = sum(p.stat().st_size for p in trace_dir.iterdir()) / 1e6
    ours_imp, ours_s, ours_mb = run_measured(DIAGNOSER_RUN, trace_dir)
    hta_imp, hta_s, hta_mb = run_measured(HTA_RUN, trace_dir, hta_python)
    parse_s = plain_parse_seconds(trace_dir)
    print(f"{name}: {len(list(trace_dir.iterdir()))} files, {size:.1f} MB on disk")
    print(f"  diagnoser analyze: {ours_s:.2f} s (+{ours_imp:.2f} s imports), peak {ours_mb:.0f} MB")
    print(f"  HTA load + 4 analyses: {hta_s:.2f} s (+{hta_imp:.2f} s imports), peak {hta_mb:.0f} MB")
    print(
        f"  speed-up vs HTA: {hta_s / ours_s:.1f}x without imports, {(hta_s + hta_imp) / (ours_s + ours_imp):.1f}x with "
        f"(goal >= 5x); peak memory vs HTA: {ours_mb / hta_mb:.2f} (goal <= 0.33)"
    )
    print(f"  plain read+parse (one process): {parse_s:.2f} s; analyze / parse = {ours_s / parse_s:.2f} (goal <= 2)")


_DENSE_KERNELS = (
    "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", "void vllm::rms_norm_kernel<c10::BFloat16>",
    "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits>", "void vllm::act_and_mul_kernel<silu>",
    "void vllm::rotary_embedding_kernel<c10::BFloat16, true>", "triton_poi_fused_add_0",
    "void at::native::elementwise_kernel<128, 4>", "void vllm::reshape_and_cache_flash_kernel",
)
_ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _dense_step(step: int, ts: int, corr: int, kernels: int, graph: bool = False) -> tuple[list[str], int, int]:
    """One decode step's events as JSON text: (events, the step's end in µs, the next correlation id).
    ``graph``: the kernels are one CUDA graph's replay, all launched by one cudaGraphLaunch."""
    events, host, dev = [], ts, ts + 50
    if graph:
        events.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 100, "tid": 100, '
                      f'"ts": {host}, "dur": 12, "args": {{"External id": {corr}, "cbid": 311, "correlation": {corr}}}}}')
        host += 20
    for j in range(kernels + 1):
        collective = j == kernels // 2
        name = _ALL_REDUCE if collective else _DENSE_KERNELS[j % len(_DENSE_KERNELS)]
        dur, dev = 8 + (j * 7) % 13, max(dev, host + 6)
        sizes = ', "In msg nelems": 4096, "Out msg nelems": 4096, "dtype": "BFloat16", "Group size": 2' if collective else ""
        if not graph:
            events.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, '
                          f'"ts": {host}, "dur": 4, "args": {{"External id": {corr}, "cbid": 211, "correlation": {corr}}}}}')
        events.append(f'{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7, "ts": {dev}, "dur": {dur}, '
                      f'"args": {{"External id": {corr}, "queued": 0, "device": 0, "context": 1, "stream": 7, '
                      f'"correlation": {corr}, "registers per thread": 128, "shared memory": 16384, '
                      f'"grid": [66, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 6{sizes}}}}}')
        corr, host, dev = corr + (not graph), host + (not graph) * 5, dev + dur + 1
    corr += graph
    events.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 100, "tid": 100, '
                  f'"ts": {host}, "dur": 5, "args": {{"correlation": {corr}}}}}')
    events.append(f'{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 7, '
                  f'"ts": {dev}, "dur": 3, "args": {{"device": 0, "stream": 7, "correlation": {corr}, "bytes": 512}}}}')
    events.append(f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 100, "tid": 100, '
                  f'"ts": {host + 6}, "dur": {max(1, dev - host - 3)}, "args": {{"correlation": {corr + 1}}}}}')
    end = dev + 40
    events.insert(0, f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": 100, "tid": 100, '
                     f'"ts": {ts}, "dur": {end - ts - 5}}}')
    return events, end, corr + 2


def write_kernel_dense(
    path: Path, megabytes: float, rank: int = 0, kernels: int = 100, graph: bool = False, total_kernels: float = float("inf")
) -> int:
    """A kernel-dense Kineto trace of about ``megabytes`` MB, or of ``total_kernels`` kernels if fewer,
    written a step at a time; returns its kernels."""
    target, written, ts, corr, step = megabytes * 1e6, 0, 1_700_000_000_000_000, 1, 0
    with open(path, "w") as out:
        out.write('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", '
                  '"computeMajor": 9, "computeMinor": 0, "numSms": 132}],\n'
                  f'"distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": 2}},\n"traceEvents": [\n')
        while written < target and step * (kernels + 1) < total_kernels:
            events, ts, corr = _dense_step(step, ts, corr, kernels, graph)
            text = ("" if step == 0 else ",\n") + ",\n".join(events)
            out.write(text)
            written += len(text)
            step += 1
        out.write("\n]}\n")
    return step * (kernels + 1)


def scale(sizes: list[float], scratch: Path, ranks: int = 1) -> None:
    """diagnoser against a stream-parse of the same generated files (``ranks`` of each size in one
    folder), at growing sizes, each in its own process."""
    import shutil

    for megabytes in sizes:
        folder = scratch / f"dense-{ranks}x{megabytes:g}MB"
        folder.mkdir(parents=True, exist_ok=True)
        try:
            kernels = sum(write_kernel_dense(folder / f"rank-{r}.json", megabytes, rank=r) for r in range(ranks))
            _, parse_s, parse_mb = run_measured(STREAM_PARSE_RUN, folder)
            _, ours_s, ours_mb = run_measured(DIAGNOSER_RUN, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(f"{ranks} x {megabytes:g} MB, {kernels:,} kernels: diagnoser {ours_s:.2f} s, peak {ours_mb:.0f} MB; "
              f"stream-parse {parse_s:.2f} s, peak {parse_mb:.0f} MB; ratio {ours_s / parse_s:.2f} (goal <= 1.5)",
              flush=True)


def _acceptance_row(what: str, target: Path, parse_code: str) -> str:
    """One acceptance set, already written at ``target``: diagnoser against the parse-only floor."""
    size = sum(p.stat().st_size for p in (target.iterdir() if target.is_dir() else [target])) / 1e9
    _, parse_s, parse_mb = run_measured(parse_code, target)
    _, ours_s, ours_mb = run_measured(DIAGNOSER_RUN, target)
    row = (f"| {what} | {size:.2f} GB | {ours_s:.1f} s | {ours_mb:.0f} MB | {parse_s:.1f} s | {parse_mb:.0f} MB "
           f"| {ours_s / parse_s:.2f} | {'yes' if ours_mb < 2048 else 'NO'} | {'yes' if ours_s <= 1.5 * parse_s else 'NO'} |")
    print(row, flush=True)
    return row


def _write_export(path: Path, kernels: float) -> int:
    """The shared 2-GPU Nsight export repeated in time to at least ``kernels`` kernels; returns them."""
    from bench_nsys_sqlite import build, kernels_per_copy

    copies = -(-int(kernels) // kernels_per_copy())
    build(path, copies)
    return copies * kernels_per_copy()


def scale_acceptance(scratch: Path, kernels: float = 10e6, only: str | None = None) -> None:
    """Issue #28's sets: a 10 M-kernel Kineto rank (CUDA-graph decode, about 3 GB), two eager ranks
    of 1 GB each, and a 5 M-kernel Nsight export; each written, measured and deleted in turn.
    Goals: peak RSS under 2 GB, time within 1.5x of the parse-only floor. ``kernels`` other than
    10 M: the Kineto rank with that many, the export with half, and no 1 GB ranks."""
    import shutil

    print("| set | on disk | diagnoser | peak RSS | parse-only | its peak | ratio | RSS < 2 GB | <= 1.5x |")
    print("|---|---|---|---|---|---|---|---|---|", flush=True)
    folder = scratch / "scale-acceptance"
    sets = (
        (f"Kineto, 1 rank, {kernels / 1e6:g} M kernels",
         lambda: write_kernel_dense(folder / "rank-0.json", 4000, graph=True, total_kernels=kernels), folder, STREAM_PARSE_RUN),
        ("Kineto, 2 ranks x 1 GB", lambda: sum(write_kernel_dense(folder / f"rank-{r}.json", 1000, rank=r) for r in range(2)),
         folder, STREAM_PARSE_RUN),
        (f"Nsight export, {kernels / 2e6:g} M kernels", lambda: _write_export(folder / "export.sqlite", kernels / 2),
         folder / "export.sqlite", SQLITE_PARSE_RUN),
    )
    if kernels != 10e6:
        sets = sets[::2]
    if only:  # one kind of set: a change to one reader is measured without the others' minutes
        sets = tuple(s for s in sets if s[0].lower().startswith(only))
    for what, write, target, parse_code in sets:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            written = write()  # not ``kernels``: the writers read it when they run
            _acceptance_row(f"{what}{f' ({written:,})' if written else ''}", target, parse_code)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--skip-big", action="store_true", help="only the 2-rank trace_filter set")
    parser.add_argument("--scale", action="store_true", help="generated kernel-dense traces of growing size instead")
    parser.add_argument("--sizes", help="--scale: these sizes in MB of JSON, comma-separated, instead of the acceptance sets")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp"), help="--scale: where the traces are written")
    parser.add_argument("--ranks", type=int, default=1, help="--scale: ranks of each size, read as one folder")
    parser.add_argument("--kernels", type=float, default=10e6,
                        help="--scale: kernels of the CUDA-graph rank (the export gets half), and no 1 GB ranks")
    parser.add_argument("--only", choices=("kineto", "nsight"), help="--scale: only the sets of this format")
    parser.add_argument("--hta-python", default=sys.executable, help="the interpreter HTA is installed in")
    parser.add_argument("--start", action="store_true", help="whole processes on each of HTA's test traces instead")
    parser.add_argument("--repeat", type=int, default=3, help="--start: runs per tool and trace (the best counts)")
    args = parser.parse_args()
    if args.scale and args.sizes:
        scale([float(x) for x in args.sizes.split(",")], args.scratch, args.ranks)
        return
    if args.scale:
        scale_acceptance(args.scratch, args.kernels, args.only)
        return
    if args.start:
        start_to_end(args.hta_python, args.repeat)
        return
    bench("trace_filter (2 ranks)", SHARED / "hta" / "trace_filter", args.hta_python)
    if not args.skip_big:
        bench("generated 8-rank set", build_big_set(args.out), args.hta_python)


if __name__ == "__main__":
    main()
