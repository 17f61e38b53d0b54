"""Serving figures from a GuideLLM report (``guidellm run --output kind=json|yaml``).

Field names are those of vllm-project/guidellm ``src/guidellm/benchmark/schemas/`` (the
``GenerativeBenchmark`` report: ``benchmarks[].metrics.<name>.successful`` distributions with
``mean`` and ``percentiles``, ``config.strategy``, ``duration``). GuideLLM's own documentation
(``schemas/benchmark/goodput.py``) says its ``inter_token_latency_ms`` is the one that leaves the
first token out, vLLM's TPOT, while its ``time_per_output_token_ms`` divides the whole request,
first token included, by the tokens: that one has no figure in the case. It reports no gap
between streamed chunks.

One benchmark is the load the case describes. A report with several (a sweep over streams or
rates) is several operating points: each becomes a run, named by its strategy, with the
concurrency it held when the strategy fixes one.
"""

from __future__ import annotations

from typing import Any

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.formats import Format
from diagnoser.readers.bench_common import METRICS, Damaged, mapping, percentiles_ms, positive, reader
from diagnoser.readers.facts import SourcedFacts

_LATENCIES = {  # case figure -> GuideLLM metric, ms per its unit
    "ttft_ms": ("time_to_first_token_ms", 1.0),
    "tpot_ms": ("inter_token_latency_ms", 1.0),
    "request_latency_ms": ("request_latency", 1e3),
}
_MEANS = {
    "output_tokens_per_s": "output_tokens_per_second",
    "requests_per_s": "requests_per_second",
    "input_tokens": "prompt_token_count",
    "output_tokens": "output_token_count",
}


def _benchmarks(artifact: Artifact) -> list | None:
    doc = artifact.mapping
    found = doc.get("benchmarks") if doc is not None else None
    if isinstance(found, list) and found and isinstance(found[0], dict) and found[0].get("type_") == "generative_benchmark":
        return found
    return None


def recognise(artifact: Artifact) -> bool:
    return _benchmarks(artifact) is not None


def _distribution(metrics: dict, name: str, where: str) -> dict[str, Any] | None:
    """The successful requests' distribution of one metric, its percentiles beside its mean."""
    family = metrics.get(name)
    if family is None:
        return None
    found = mapping(mapping(family, where).get("successful"), f"{where}.successful")
    return {**mapping(found.get("percentiles") or {}, f"{where}.successful.percentiles"), "mean": found.get("mean")}


def _figures(benchmark: dict, where: str) -> dict[str, Any]:
    """ServingMetrics fields of one benchmark, each with the key it came from."""
    metrics = mapping(benchmark.get("metrics"), f"{where}.metrics")
    found: dict[str, Any] = {}
    for path, (name, scale) in _LATENCIES.items():
        stats = _distribution(metrics, name, f"{where}.metrics.{name}")
        if stats is not None:
            found[path] = (percentiles_ms(stats, f"{where}.metrics.{name}.successful", scale), f"{where}.metrics.{name}.successful")
    for path, name in _MEANS.items():
        stats = _distribution(metrics, name, f"{where}.metrics.{name}")
        if stats is not None:
            found[path] = (positive(stats["mean"], f"{where}.metrics.{name}.successful.mean"), f"{where}.metrics.{name}.successful.mean")
    found["duration_s"] = (positive(benchmark.get("duration"), f"{where}.duration"), f"{where}.duration")
    strategy = mapping(mapping(benchmark.get("config"), f"{where}.config").get("strategy"), f"{where}.config.strategy")
    found["concurrency"] = (_concurrency(strategy, f"{where}.config.strategy"), f"{where}.config.strategy.streams")
    if not any(v for v, _ in found.values()):
        raise Damaged(f"{where} holds no figure (no metrics.time_to_first_token_ms, request_latency or duration)")
    return found


def _concurrency(strategy: dict, where: str) -> float | None:
    """Streams held open by a concurrent strategy, one for synchronous; a rate strategy fixes none."""
    kind = strategy.get("type_")
    if kind == "synchronous":
        return 1.0
    return positive(strategy.get("streams"), f"{where}.streams") if kind == "concurrent" else None


def _name(strategy: dict) -> str:
    kind = str(strategy.get("type_", "benchmark"))
    detail = strategy.get("streams") if kind == "concurrent" else strategy.get("rate")
    return f"{kind} {detail:g}" if isinstance(detail, (int, float)) else kind


def _read(artifact: Artifact) -> SourcedFacts:
    benchmarks = _benchmarks(artifact)
    if benchmarks is None:
        raise Damaged("it has no benchmarks list of generative_benchmark entries (cut short?)")
    facts = SourcedFacts()
    if len(benchmarks) == 1:
        facts.add(f"{METRICS}.boundary", "client_receipt", f"{artifact.key('benchmarks', 0)} (GuideLLM, a client)")
        for path, (value, key) in _figures(mapping(benchmarks[0], "benchmarks[0]"), "benchmarks.0").items():
            facts.add(f"{METRICS}.{path}", value, artifact.key(key))
        if f"{METRICS}.output_tokens_per_s" in facts:  # output over the benchmark's duration, prefill included
            facts.add(f"{METRICS}.rate_includes_prefill", True, artifact.key("benchmarks.0.metrics.output_tokens_per_second"))
        return facts
    facts.add("observations.runs", [_run(b, f"benchmarks.{i}") for i, b in enumerate(benchmarks)], artifact.key("benchmarks"))
    return facts


def _run(benchmark: Any, where: str) -> dict:
    """One operating point of a sweep: the typical figure of each kind (the median where reported)."""
    figures = {path: value for path, (value, _) in _figures(mapping(benchmark, where), where).items()}
    typical = {path: (v.get("p50") or v.get("mean")) if isinstance(v, dict) else v for path, v in figures.items()}
    strategy = benchmark["config"]["strategy"]
    run: dict[str, Any] = {
        "name": _name(strategy),
        "boundary": "client_receipt",
        "figures": {
            k: v
            for k, v in {
                "per_token_ms": typical.get("tpot_ms"),
                "ttft_ms": typical.get("ttft_ms"),
                "output_tokens_per_s": typical.get("output_tokens_per_s"),
                "duration_s": typical.get("duration_s"),
            }.items()
            if v is not None
        },
    }
    if typical.get("concurrency") is not None:
        run["settings"] = {"concurrency": typical["concurrency"]}
    return run


FORMAT = Format(
    name="guidellm",
    what="a GuideLLM benchmarks report (JSON or YAML)",
    recognise=recognise,
    read=reader("a GuideLLM report", _read),
)
