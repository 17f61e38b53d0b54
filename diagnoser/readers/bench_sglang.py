"""Serving figures from ``python -m sglang.bench_serving --output-file``: one JSON object per run.

Keys are those ``save_results``/``run_benchmark`` write in sgl-project/sglang
``python/sglang/bench_serving.py`` (``mean_ttft_ms``, ``median_itl_ms``, ``output_throughput``,
``max_concurrency``, ...); older releases wrote fewer of them, and every figure is optional.
The arguments it echoes (``dataset_name``, ``sharegpt_output_len``) tell it from vLLM's result file.

A file appended to by a sweep holds one run per line; the last is read (its line is in every
source) and the others are named in ``missing``, because a sweep's runs differ in load and a
mean over them would describe none.
"""

from __future__ import annotations

import math
from typing import Any

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.formats import Format
from diagnoser.errors import InputError
from diagnoser.readers.facts import SourcedFacts

METRICS = "observations.metrics"
_SIGNATURE = ("backend", "dataset_name", "sharegpt_output_len", "completed", "duration")
# case figure -> the key stem SGLang writes as {mean,median,p90,p99}_<stem>_ms
_LATENCIES = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "request_latency_ms": "e2e_latency"}
_STATS = {"mean": "mean", "median": "p50", "p90": "p90", "p99": "p99"}


def _runs(artifact: Artifact) -> list[dict] | None:
    doc = artifact.json
    rows = [doc] if isinstance(doc, dict) else artifact.jsonl
    if not rows:
        return None
    return rows if all(key in rows[-1] for key in _SIGNATURE) else None


def _recognise(artifact: Artifact) -> bool:
    return _runs(artifact) is not None


def _figure(run: dict, key: str, where: str) -> float | None:
    """A positive figure; 0 means SGLang measured nothing (a non-streaming backend has no TTFT) and is left out."""
    value: Any = run.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise InputError(f'{where} is "{value}", not a number')
    return float(value) if value > 0 and math.isfinite(value) else None


def percentiles(run: dict, stem: str, where: Any) -> dict[str, float] | None:
    """``{mean, p50, p90, p99}`` in ms from ``<stat>_<stem>_ms`` keys (vLLM's benchmark writes the same keys)."""
    found = {name: v for stat, name in _STATS.items() if (v := _figure(run, f"{stat}_{stem}_ms", where(f"{stat}_{stem}_ms"))) is not None}
    return found or None


def read(artifact: Artifact) -> SourcedFacts:
    runs = _runs(artifact)
    if runs is None:
        raise InputError(f"{artifact.name}: not an sglang.bench_serving result")
    run, line = runs[-1], max(n for n, row in enumerate(artifact.lines, 1) if row.strip())

    def where(key: str) -> str:
        return f"{artifact.at(line)} {key}" if len(runs) > 1 else artifact.key(key)

    completed = _figure(run, "completed", where("completed"))
    duration = _figure(run, "duration", where("duration"))
    if not completed or not duration:
        raise InputError(f"{where('completed')}: the run completed no request or took no time; nothing to read")
    facts = SourcedFacts()
    facts.add(f"{METRICS}.boundary", "client_receipt", f"{where('backend')} (sglang.bench_serving, a client)")
    for path, stem in _LATENCIES.items():
        facts.add(f"{METRICS}.{path}", percentiles(run, stem, where), where(f"*_{stem}_ms"))
    facts.add(f"{METRICS}.duration_s", duration, where("duration"))
    output_rate = _figure(run, "output_throughput", where("output_throughput"))
    facts.add(f"{METRICS}.output_tokens_per_s", output_rate, where("output_throughput"))
    if output_rate is not None:  # total output over the whole run, prompts' prefill time included
        facts.add(f"{METRICS}.rate_includes_prefill", True, where("output_throughput"))
    requests = _figure(run, "request_throughput", where("request_throughput"))
    if requests is not None:
        facts.add(f"{METRICS}.requests_per_s", requests, where("request_throughput"))
    else:
        facts.add(f"{METRICS}.requests_per_s", completed / duration, where("completed / duration"))
    facts.add(f"{METRICS}.concurrency", _figure(run, "max_concurrency", where("max_concurrency")), where("max_concurrency"))
    for path, key in (("input_tokens", "total_input_tokens"), ("output_tokens", "total_output_tokens")):
        total = _figure(run, key, where(key))
        facts.add(f"{METRICS}.{path}", total / completed if total is not None else None, where(f"{key} / completed"))
    if len(runs) > 1:
        facts.missing.append(
            f"{METRICS}: {artifact.name} holds {len(runs)} runs; the last (line {line}) was read. "
            "To diagnose another, save it alone (one --output-file per run)"
        )
    return facts


FORMAT = Format(
    name="sglang-bench-serving",
    what="python -m sglang.bench_serving --output-file result (JSON lines)",
    recognise=_recognise,
    read=read,
)
