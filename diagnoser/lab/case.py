"""A case built from a live server, with diagnoser's own probes, profile and trace analysis.

    measure(url) -> Case      client probe, context sweep, a stream under a long prompt,
                              one profiled stream, /metrics, /server_info
    score(diagnosis, cause, names) -> Score   where the true cause ranks, and what led it

Nothing here knows which fault is on: every figure is read from the server over HTTP (the
stream's chunk times and server stamps, a profile fetched through ``/start_profile``, the
Prometheus text), and the case holds only what those measurements establish.
"""

from __future__ import annotations

import statistics
import threading
from dataclasses import dataclass
from pathlib import Path


from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.hypothesis import Diagnosis, Kind
from diagnoser.models.observations import Observations
from diagnoser.models.serving import MetricBoundary, ServingMetrics
from diagnoser.models.runtime import StreamObs
from diagnoser.probes import client, context_sweep
from diagnoser.probes.base import ProbeContext
from diagnoser.probes.client import DEFAULT_PROMPT
from diagnoser.probes.context_sweep import prompt_ids
from diagnoser.http import Client
from diagnoser.probes.server_info import read_server_info
from diagnoser.probes.serving_metrics import content_chunks, gaps_ms
from diagnoser.probes.sse_client import StreamedResponse, request_body, served_model, stream
from diagnoser.probes.to_case import merge_observations
from diagnoser.trace.analysis import analyze_traces
from diagnoser.trace.facts import to_observations as trace_observations
from diagnoser.trace.kineto import read_kineto_many

# What the probes are asked for: eight streams, each long enough for its own output-length slope, one at a time
# (the batch the sweep and the profile see), and a sweep across the lab's context range. Eight, not four: on the
# 2-core box one stream's slope ranges from 1 to 45 ms per 1k tokens under a growing detokenizer, and four such
# replicates missed the 99 % test in 3 of 6 draws (two CPU burners) where eight passed all 3 at t >= 6.1
# (threshold 3.0); the healthy server's eight stayed at |t| <= 1.5.
CLIENT = {"max_tokens": 256, "requests": 8, "concurrency": 1}
SWEEP = {"context_lengths": [128, 1024, 2048], "sweep_output_tokens": 32, "sweep_repeats": 3}
# The profiled stream starts as the client probe's requests do, so the profiled steps and the
# unprofiled ones the probe timed run at nearly the same contexts and differ by the profiler.
PROFILED_TOKENS = 64
# A long prompt arrives while a stream decodes: the stream's worst gap says whether the prefill
# waits its turn in chunks beside the decodes or stalls them. It is sent once the stream has its
# eighth token, not after a fixed delay: under two CPU burners a prompt sent 0.15 s in arrived after
# the 64-token stream had ended, and the prefill-stall fault showed no stall.
INTERFERENCE_TOKENS = 64
LONG_PROMPT = 2048
LONG_PROMPT_AFTER_CHUNKS = 8
# A measured gain under 15 % of the step is within the lab's run-to-run noise on a shared 2-core
# box: eleven healthy servers, measured afresh, claimed 0-12 % of the step for host overhead (the
# eager loop's per-op Python dispatch, less the profiler's cost, both measured); every fault's
# true cause claims over 20 %.
NOISE_SHARE = 0.15


def _probe(module, url: str, options: dict) -> dict:
    ctx = ProbeContext(timeout_s=300, options={"endpoint": url, **options})
    return module.to_observations(module.run(ctx))


def emission_interval_ms(response: StreamedResponse) -> float | None:
    """Median interval between the server's stamps on consecutive tokens after the first: one
    step and the loop's work between steps, the same window a trace's step budget spans."""
    stamps = [c.emitted_ns for c in response.chunks[1:] if c.emitted_ns is not None]
    gaps = [(b - a) / 1e6 for a, b in zip(stamps, stamps[1:])]
    return statistics.median(gaps) if gaps else None


def profile(url: str, http: Client) -> tuple[list[Path], float | None]:
    """One streamed request under the profiler, as ``/start_profile`` and ``/stop_profile`` record
    it, and what the profiler added to each of its steps.

    The same request streams once before and once after it without the profiler; the profiled
    stream's interval between emissions, less the mean of theirs, is the profiler's own cost per
    step. Timing both sides at one boundary (the server's stamps) and either side of the profiled
    run cancels the machine's steady drift, which a single twin would count as profiler cost.
    """
    model = served_model(http, url)
    body = request_body("completions", model, DEFAULT_PROMPT, PROFILED_TOKENS, {})
    endpoint = f"{url}/v1/completions"
    before = emission_interval_ms(stream(http, endpoint, body, 300))
    if http.post(f"{url}/start_profile").status_code != 200:
        raise InputError(f"{url}/start_profile: the server does not profile")
    profiled = emission_interval_ms(stream(http, endpoint, body, 300))
    reply = http.post(f"{url}/stop_profile", timeout_s=300)
    if reply.status_code != 200:
        raise InputError(f"{url}/stop_profile: HTTP {reply.status_code}")
    after = emission_interval_ms(stream(http, endpoint, body, 300))
    inflation = profiled - (before + after) / 2 if None not in (before, profiled, after) else None
    return [Path(p) for p in reply.json()["traces"]], inflation


def prefill_interference(url: str, http: Client) -> StreamObs:
    """The worst gap of a stream while a long prompt is admitted beside it."""
    model = served_model(http, url)
    endpoint = f"{url}/v1/completions"

    failed: list[Exception] = []
    decoding = threading.Event()

    def count(chunks: int) -> None:
        if chunks >= LONG_PROMPT_AFTER_CHUNKS:
            decoding.set()

    def long_prompt() -> None:
        decoding.wait(timeout=300)
        try:
            with Client(url) as other:
                stream(other, endpoint, request_body("completions", model, prompt_ids(LONG_PROMPT, 0), 1, {}), 300)
        except Exception as err:  # noqa: BLE001 - raised again in the caller's thread
            failed.append(err)

    arrival = threading.Thread(target=long_prompt, name="long-prompt")
    arrival.start()
    try:
        body = request_body("completions", model, "Keep decoding.", INTERFERENCE_TOKENS, {})
        response = stream(http, endpoint, body, 300, on_chunk=count)
    finally:
        decoding.set()  # a stream that failed early must not leave the prompt's thread waiting
        arrival.join()
    if failed:
        raise failed[0]
    return StreamObs(worst_stall_ms=max(gaps_ms(content_chunks(response))))


def metrics(url: str, http: Client) -> ServingMetrics:
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


def warm_up(url: str, http: Client) -> None:
    """One request of the client probe's shape, not measured: a fresh server's first request pays
    one-time costs (its allocator growing to the step's buffers), as a benchmark's first run does."""
    body = request_body("completions", served_model(http, url), DEFAULT_PROMPT, CLIENT["max_tokens"], {})
    stream(http, f"{url}/v1/completions", body, 300)


def measure(url: str) -> Case:
    observations = Observations()
    with Client(url, timeout_s=60) as http:
        warm_up(url, http)
    observations = merge_observations(observations, _probe(client, url, CLIENT))
    observations = merge_observations(observations, _probe(context_sweep, url, SWEEP))
    with Client(url, timeout_s=60) as http:
        traces, inflation = profile(url, http)
        found = trace_observations(analyze_traces(read_kineto_many(traces)))
        if found.budget is not None and inflation is not None and found.budget.step_ms - inflation > 0:
            unprofiled = found.budget.step_ms - inflation  # the profiled step less what the profiler added
            found = found.model_copy(update={"budget": found.budget.model_copy(update={"unprofiled_step_ms": unprofiled})})
        observations = merge_observations(observations, {k: getattr(found, k) for k in found.model_fields_set})
        observations = merge_observations(observations, {"metrics": metrics(url, http), "stream": prefill_interference(url, http)})
        settings = read_server_info(http, url)
        if settings is not None:
            observations = merge_observations(observations, {"server": settings})
    return Case(title=f"lab server at {url}", observations=observations)


@dataclass(frozen=True)
class Score:
    rank: int | None  # 1-based among the causes; None: not named
    grade: str | None
    gain: str
    top: str | None
    runner_up: str  # the best-ranked other cause and its gain: the margin the true cause led by


def causes(diagnosis: Diagnosis) -> list:
    return [h for h in diagnosis.hypotheses if h.kind == Kind.cause]


def gain_text(h) -> str:
    return f"{h.gain.removable_ms:.2f} ms of {h.gain.step_ms:.2f} ({h.gain.speedup:.2f}x)" if h.gain else "not bounded"


def score(diagnosis: Diagnosis, cause: str, names: tuple[tuple[str, object], ...] = ()) -> Score:
    """Where ``cause`` ranks among the causes; with ``names``, only a firing whose evidence carries
    those values counts (a late-rank finding that blames the wrong rank does not name the fault)."""
    ranked = causes(diagnosis)
    top = ranked[0].rule if ranked else None
    others = [h for h in ranked if h.rule != cause]
    runner_up = f"{others[0].rule} ({others[0].grade.value if others[0].grade else '-'}, {gain_text(others[0])})" if others else "-"
    for i, h in enumerate(ranked, 1):
        carried = {e.name: e.value for e in h.evidence}
        if h.rule == cause and all(carried.get(name) == value for name, value in names):
            return Score(i, h.grade.value if h.grade else None, gain_text(h), top, runner_up)
    return Score(None, None, "-", top, runner_up)


def measured_above_noise(diagnosis: Diagnosis) -> list[str]:
    """Causes graded measured whose bounded gain exceeds the noise share of the step."""
    return [
        h.rule for h in causes(diagnosis)
        if h.grade is not None and h.grade.value == "measured" and h.gain and h.gain.removable_ms > NOISE_SHARE * h.gain.step_ms
    ]
