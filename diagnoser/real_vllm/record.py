"""Record what an engineer would bring from a real vLLM with a known fault: the server's log, the
``vllm bench serve --save-result`` JSON of a load, and ``/metrics`` scraped before and after it.

    python -m diagnoser.real_vllm.record FAULT OUT_DIR      # OUT_DIR/{server.log,bench.json,metrics_*.txt}

The server runs as in production (no dev mode, so no ``/server_info``): every fact a case gets
from these files is one the user would have. ``vllm bench serve`` is vLLM's own client, run from
vLLM's environment through its module (the CPU build's ``vllm`` script cannot find its own
distribution name).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from diagnoser.real_vllm import OFFLINE, VllmServer, python_path, tiny_model
from diagnoser.real_vllm.faults import FAULTS, background

BENCH_TIMEOUT_S = 300
_BENCH_SERVE = "import argparse; from vllm.benchmarks.serve import add_cli_args, main; p = argparse.ArgumentParser(); add_cli_args(p); main(p.parse_args())"


@dataclass(frozen=True)
class Load:
    prompts: int = 16
    concurrency: int = 4
    input_len: int = 64
    output_len: int = 64


def bench_serve(url: str, out: Path, load: Load, extra_body: dict | None = None) -> Path:
    """Run ``vllm bench serve`` against ``url``; its result JSON lands at ``out``."""
    chat = extra_body is not None  # request fields such as response_format go through the chat API
    command = [
        str(python_path()), "-c", _BENCH_SERVE,
        "--backend", "openai-chat" if chat else "vllm", "--endpoint", "/v1/chat/completions" if chat else "/v1/completions",
        "--base-url", url, "--model", "tiny", "--tokenizer", str(tiny_model()),
        "--dataset-name", "random", "--random-input-len", str(load.input_len), "--random-output-len", str(load.output_len),
        "--num-prompts", str(load.prompts), "--max-concurrency", str(load.concurrency), "--ignore-eos", "--disable-tqdm",
        "--seed", "7", "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name,
    ]
    if extra_body:
        command += ["--extra-body", json.dumps(extra_body)]
    done = subprocess.run(command, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}): {(done.stderr or done.stdout)[-1500:]}")
    return out


def _warm_up(url: str, extra_body: dict | None) -> None:
    """One request of the benchmark's kind, so its load does not pay for the first compile: sent directly, since a
    second ``vllm bench serve`` would spend its own start (importing vLLM) on a request."""
    chat = extra_body is not None
    body = {"model": "tiny", "max_tokens": 8, **(extra_body or {}),
            **({"messages": [{"role": "user", "content": "warm up"}]} if chat else {"prompt": "warm up"})}
    with httpx.Client(trust_env=False, timeout=BENCH_TIMEOUT_S) as http:
        http.post(f"{url}/v1/chat/completions" if chat else f"{url}/v1/completions", json=body).raise_for_status()


def _scrape(url: str) -> str:
    with httpx.Client(trust_env=False, timeout=30) as http:
        reply = http.get(f"{url}/metrics")
        reply.raise_for_status()
        return reply.text


def record(fault_name: str, out_dir: str | Path, load: Load = Load()) -> Path:
    """The fault's server, a warm-up, a scrape, the benchmark, a scrape; then the server's log."""
    fault = FAULTS[fault_name]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    extra = fault.live.get("extra")
    shape = Load(load.prompts, fault.live.get("concurrency", load.concurrency), load.input_len, load.output_len)
    with VllmServer(fault.flags, dev_mode=False) as server:
        _warm_up(server.url, extra)
        with background(fault, server.url):
            (out / "metrics_before.txt").write_text(_scrape(server.url))
            bench_serve(server.url, out / "bench.json", shape, extra)
            (out / "metrics_after.txt").write_text(_scrape(server.url))
        server.stop()
        shutil.copyfile(server.log, out / "server.log")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in FAULTS:
        sys.exit(f"usage: python -m diagnoser.real_vllm.record FAULT OUT_DIR   (FAULT: {', '.join(FAULTS)})")
    print(record(sys.argv[1], sys.argv[2]))
