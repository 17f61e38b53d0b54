"""Record a short profile of the lab server's decode loop per fault, the way tests/data/lab's traces were made.

    python bench/record_lab_trace.py --out DIR [--device cpu|cuda] FAULT ...

For each fault a lab server starts with it alone; one unmeasured request warms it up, then
``POST /start_profile``, one streamed 16-token completion ("Describe a decode step.",
``ignore_eos``) and ``POST /stop_profile``. Rank 0's trace is written gzipped as
``DIR/<device>-<fault>.pt.trace.json.gz``, small enough to commit under tests/data/lab
(a trace over ``LIMIT_BYTES`` is an error: profile fewer tokens instead). Each line printed
says the file, its size and the steps ``diagnoser analyze`` finds in it.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from pathlib import Path

from diagnoser.http import Client
from diagnoser.lab.process import LabServer
from diagnoser.probes.sse_client import request_body, served_model, stream
from diagnoser.trace.analysis import analyze_traces
from diagnoser.trace.kineto import read_kineto

PROMPT = "Describe a decode step."
TOKENS = 16
LIMIT_BYTES = 5 * 1024 * 1024


def record(fault: str, device: str, out: Path) -> Path:
    with tempfile.TemporaryDirectory() as profiles, LabServer([] if fault == "none" else [fault], profile_dir=profiles, device=device) as url:
        with Client(url, timeout_s=120) as http:
            body = request_body("completions", served_model(http, url), PROMPT, TOKENS, {})
            stream(http, f"{url}/v1/completions", body, 120)  # warm-up: allocator, kernels chosen, first-call costs
            if http.post(f"{url}/start_profile").status_code != 200:
                raise SystemExit(f"{url}/start_profile failed")
            stream(http, f"{url}/v1/completions", body, 120)
            reply = http.post(f"{url}/stop_profile")
            if reply.status_code != 200:
                raise SystemExit(f"{url}/stop_profile: HTTP {reply.status_code}")
        rank0 = Path(reply.json()["traces"][0])
        path = out / f"{device}-{fault}.pt.trace.json.gz"
        path.write_bytes(gzip.compress(rank0.read_bytes()))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("faults", nargs="+", help="faults to record, each on a server of its own (none: healthy)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = False
    for fault in args.faults:
        path = record(fault, args.device, args.out)
        size = path.stat().st_size
        result = analyze_traces([read_kineto(path)])
        print(f"{path.name}: {size / 1e6:.2f} MB gzipped, {len(result.steps)} steps ({result.method})")
        if size > LIMIT_BYTES:
            print(f"{path.name}: over {LIMIT_BYTES / 1e6:.0f} MB, too large to commit", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
