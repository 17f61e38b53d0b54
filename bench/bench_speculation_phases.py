"""What n-gram speculation costs the real vLLM per step, measured on two servers: speculation off and on.

    python bench/bench_speculation_phases.py [--requests N] [--max-tokens N]

One server's trace cannot say what its steps would cost without speculation: the steps that verify
no draft are still steps of a speculating engine. This bench starts the real vLLM (CPU build, tiny
model) twice, without and with the ``ngram-low-acceptance`` fault's speculation, sends both the
fault's request mix (the users' sampling fields), profiles the same load with vLLM's own
model-runner scopes on (``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1``: preprocess, forward, postprocess,
sample, draft, bookkeep), and prints, per server and number of decoding sequences, the median step
window (one engine step's start to the next) and each phase, apart for steps that verified drafts
and steps that verified none; then the acceptance the server's counters give over the window.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import threading
from bisect import bisect_left
from collections import defaultdict
from pathlib import Path

import httpx

from diagnoser.live.profile import profile
from diagnoser.readers.prometheus import parse_scrape, window
from diagnoser.real_vllm import VllmServer
from diagnoser.real_vllm.faults import FAULTS
from diagnoser.trace.steps import decode_tokens, engine_step_kind

FAULT = FAULTS["ngram-low-acceptance"]
SCOPES = {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}
PHASE_PREFIX = "gpu_model_runner: "
PHASES = ("preprocess", "forward", "postprocess", "sample", "draft", "bookkeep")
SPEC_COUNTERS = ("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total")
SETTLE_S = 60.0


def step_table(trace: Path) -> dict[tuple[int, bool], dict[str, list[float]]]:
    """(sequences decoding, verified drafts?) -> phase -> durations in ms, from the worker's trace."""
    with gzip.open(trace) if trace.suffix == ".gz" else open(trace, "rb") as f:
        events = json.load(f)["traceEvents"]
    ranges = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"), key=lambda e: e["ts"])
    steps = [e for e in ranges if engine_step_kind(e["name"])[0] is not None]
    phases = [e for e in ranges if e["name"].startswith(PHASE_PREFIX)]
    starts = [e["ts"] for e in phases]
    table: dict[tuple[int, bool], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for step, following in zip(steps, steps[1:]):
        counts = decode_tokens(step["name"])
        if counts is None:
            continue  # a step that prefilled, or held nothing
        row = table[(counts[0], counts[1] > counts[0])]
        row["window"].append((following["ts"] - step["ts"]) / 1000)
        for e in phases[bisect_left(starts, step["ts"]):bisect_left(starts, following["ts"])]:
            row[e["name"][len(PHASE_PREFIX):]].append(e["dur"] / 1000)
    return table


def measure(flags: tuple[str, ...], requests: int, max_tokens: int) -> tuple[dict, float | None]:
    with VllmServer(flags, env=SCOPES) as server, httpx.Client(trust_env=False, timeout=120) as http:
        def one(i: int) -> None:
            http.post(f"{server.url}/v1/completions", json={"model": "tiny", "prompt": f"request {i}: tell a story of the sea",
                                                            "max_tokens": max_tokens, **FAULT.live["extra"]})

        def load() -> None:
            threads = [threading.Thread(target=one, args=(i,)) for i in range(requests)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        one(-1)  # warm-up
        before = parse_scrape(http.get(f"{server.url}/metrics").text)
        found = profile(server.url, server.profile_dir, load, SETTLE_S)
        counted = window(before, parse_scrape(http.get(f"{server.url}/metrics").text))
        workers = [t for t in found.traces if t.name.startswith("rank0")]
        if not workers:
            raise SystemExit(f"no worker trace: {found.note or [t.name for t in found.traces]}")
        drafted, accepted = (counted.total(name) for name in SPEC_COUNTERS)
        return step_table(workers[0]), (accepted / drafted if drafted else None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4, help="streams profiled at once (at most 16)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens each stream decodes (at most 256)")
    args = parser.parse_args()
    requests, max_tokens = min(max(args.requests, 1), 16), min(max(args.max_tokens, 8), 256)
    print(f"request mix: {json.dumps(FAULT.live['extra'])}; {requests} streams of {max_tokens} tokens; "
          f"speculation: {FAULT.flags[-1]}", file=sys.stderr)
    header = ("server", "sequences", "verified drafts", "steps", "step window ms", *(f"{p} ms" for p in PHASES))
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    acceptance = {}
    for name, flags in (("speculation off", ()), ("ngram on", FAULT.flags)):
        table, acceptance[name] = measure(flags, requests, max_tokens)
        for (sequences, verified), row in sorted(table.items()):
            cells = [f"{statistics.median(row[p]):.2f}" if row.get(p) else "-" for p in ("window", *PHASES)]
            print(f"| {name} | {sequences} | {'yes' if verified else 'no'} | {len(row['window'])} | " + " | ".join(cells) + " |")
    rate = acceptance["ngram on"]
    print(f"\ndrafted tokens accepted with ngram on (server counters over the window): "
          f"{'none drafted' if rate is None else f'{rate:.1%}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
