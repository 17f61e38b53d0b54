"""A case built from a live server, with diagnoser's own probes, profile and trace analysis.

    measure(url) -> Case      client probe, context sweep, one profiled stream, /metrics
    score(diagnosis, cause) -> Score

Nothing here knows which fault is on: every figure is read from the server over HTTP (the
stream's chunk times and server stamps, a profile fetched through ``/start_profile``, the
Prometheus text), and the case holds only what those measurements establish.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx

from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.hypothesis import Diagnosis, Kind
from diagnoser.models.observations import Observations
from diagnoser.models.serving import MetricBoundary, ServingMetrics
from diagnoser.probes import client, context_sweep
from diagnoser.probes.base import ProbeContext
from diagnoser.probes.sse_client import request_body, served_model, stream
from diagnoser.probes.to_case import merge_observations
from diagnoser.trace.analysis import analyze_traces
from diagnoser.trace.facts import to_observations as trace_observations
from diagnoser.trace.kineto import read_kineto_many

# What the probes are asked for: two concurrent streams long enough for an output-length slope,
# and a sweep across the lab's context range.
CLIENT = {"max_tokens": 256, "requests": 2, "concurrency": 2}
SWEEP = {"context_lengths": [128, 512, 1024], "sweep_output_tokens": 32, "sweep_repeats": 1}
PROFILED_TOKENS = 24
NOISE_SHARE = 0.10  # a measured gain under 10 % of the step is within the lab's run-to-run noise


def _probe(module, url: str, options: dict) -> dict:
    ctx = ProbeContext(timeout_s=300, options={"endpoint": url, **options})
    return module.to_observations(module.run(ctx))


def profile(url: str, http: httpx.Client) -> list[Path]:
    """One streamed request under the profiler, as ``/start_profile`` and ``/stop_profile`` record it."""
    model = served_model(http, url)
    if http.post(f"{url}/start_profile").status_code != 200:
        raise InputError(f"{url}/start_profile: the server does not profile")
    stream(http, f"{url}/v1/completions", request_body("completions", model, "Profile this decode loop.", PROFILED_TOKENS, {}), 300)
    reply = http.post(f"{url}/stop_profile", timeout=300)
    if reply.status_code != 200:
        raise InputError(f"{url}/stop_profile: HTTP {reply.status_code}")
    return [Path(p) for p in reply.json()["traces"]]


def metrics(url: str, http: httpx.Client) -> ServingMetrics:
    """The engine-side figures /metrics carries, read with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(http.get(f"{url}/metrics").text):
        for sample in family.samples:
            if sample.name.endswith(("_sum", "_count")) or sample.name.endswith("_total"):
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    itl_n = sums.get("vllm:inter_token_latency_seconds_count", 0.0)
    ttft_n = sums.get("vllm:time_to_first_token_seconds_count", 0.0)
    figures = {}
    if itl_n:
        figures["itl_ms"] = {"mean": 1e3 * sums["vllm:inter_token_latency_seconds_sum"] / itl_n}
    if ttft_n:
        figures["ttft_ms"] = {"mean": 1e3 * sums["vllm:time_to_first_token_seconds_sum"] / ttft_n}
    return ServingMetrics(boundary=MetricBoundary.engine, **figures)


def measure(url: str) -> Case:
    observations = Observations()
    observations = merge_observations(observations, _probe(client, url, CLIENT))
    observations = merge_observations(observations, _probe(context_sweep, url, SWEEP))
    with httpx.Client(timeout=60) as http:
        traces = profile(url, http)
        analysis = analyze_traces(read_kineto_many(traces))
        found = trace_observations(analysis)
        observations = merge_observations(observations, {k: getattr(found, k) for k in found.model_fields_set})
        observations = merge_observations(observations, {"metrics": metrics(url, http)})
    return Case(title=f"lab server at {url}", observations=observations)


@dataclass(frozen=True)
class Score:
    rank: int | None  # 1-based among the causes; None: not named
    grade: str | None
    gain: str
    top: str | None


def causes(diagnosis: Diagnosis) -> list:
    return [h for h in diagnosis.hypotheses if h.kind == Kind.cause]


def score(diagnosis: Diagnosis, cause: str) -> Score:
    ranked = causes(diagnosis)
    top = ranked[0].rule if ranked else None
    for i, h in enumerate(ranked, 1):
        if h.rule == cause:
            gain = f"{h.gain.removable_ms:.2f} ms of {h.gain.step_ms:.2f} ({h.gain.speedup:.2f}x)" if h.gain else "not bounded"
            return Score(i, h.grade.value if h.grade else None, gain, top)
    return Score(None, None, "-", top)


def measured_above_noise(diagnosis: Diagnosis) -> list[str]:
    """Causes graded measured whose bounded gain exceeds the noise share of the step."""
    return [
        h.rule for h in causes(diagnosis)
        if h.grade is not None and h.grade.value == "measured" and h.gain and h.gain.removable_ms > NOISE_SHARE * h.gain.step_ms
    ]
