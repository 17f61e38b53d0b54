"""Serving figures of one measured load, read from a vLLM or SGLang server's ``/metrics``.

A figure describes the load only when it is taken over the load: latencies and token counts are
windowed between a scrape before it and one after (``prometheus.window``), and a gauge (queue,
batch, KV usage) is the largest value any scrape saw, which means little unless someone scraped
while the load ran (``gauges``). A figure over a window in which nothing was observed is left out,
never given as 0: the rules read an absent figure as "not measured" and a 0 as a measurement.

Every figure is the engine's own (``boundary = engine``): it counts from the scheduler's view,
without the HTTP server, the network or the client's stream parsing.

Metric names: vLLM's are documented in vllm-project/vllm ``docs/design/metrics.md`` and defined in
``vllm/v1/metrics/loggers.py`` (the recordings in ``tests/data/vllm`` are of vLLM 0.32); SGLang's in
sgl-project/sglang ``docs/references/production_metrics.md`` and ``python/sglang/srt/metrics/collector.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from diagnoser.errors import InputError
from diagnoser.readers.facts import SourcedFacts
from diagnoser.readers.prometheus import Histogram, Scrape, window

WINDOW = "window of 2 scrapes"
METRICS = "observations.metrics"
_SPEC = "observations.speculation"

# Engine histograms in seconds -> ServingMetrics figures in ms; an older spelling follows the current one.
_VLLM_LATENCIES = {
    "itl_ms": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),  # the latter: its deprecated name
    "ttft_ms": ("vllm:time_to_first_token_seconds",),
    "tpot_ms": ("vllm:request_time_per_output_token_seconds",),
    "request_latency_ms": ("vllm:e2e_request_latency_seconds",),
    "queue_ms": ("vllm:request_queue_time_seconds",),
    "prefill_ms": ("vllm:request_prefill_time_seconds",),
}
_SGLANG_LATENCIES = {
    "itl_ms": ("sglang:inter_token_latency_seconds",),
    # observed at every streamed chunk as the request's TPOT so far (older SGLang); per request, not per token
    "tpot_ms": ("sglang:time_per_output_token_seconds",),
    "ttft_ms": ("sglang:time_to_first_token_seconds",),
    "request_latency_ms": ("sglang:e2e_request_latency_seconds",),
    "queue_ms": ("sglang:queue_time_seconds",),
}
# vLLM counts these as finished but they did not complete.
_NOT_COMPLETED = frozenset({"abort", "error"})


@dataclass(frozen=True)
class _Gauge:
    """A gauge and how its series combine in one scrape: summed (a server-wide queue) or the
    largest (one engine's batch or KV cache, which a sum over engines would misstate)."""

    path: str
    names: tuple[str, ...]  # the current name first, then older spellings
    read: Callable[[Scrape, str], float | None]
    zero_is_a_figure: bool = True  # false where the case field must be positive


_VLLM_GAUGES = (
    _Gauge(f"{METRICS}.waiting_requests", ("vllm:num_requests_waiting",), Scrape.total),
    _Gauge(f"{METRICS}.running_sequences", ("vllm:num_requests_running",), Scrape.largest, zero_is_a_figure=False),
    _Gauge("observations.memory.kv_cache_usage", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), Scrape.largest),
)
# SGLang reports scheduler gauges from the first TP rank of each data-parallel rank, each with its
# own queue (with --enable-metrics-for-all-schedulers every TP rank reports, and a sum overcounts).
_SGLANG_GAUGES = (
    _Gauge(f"{METRICS}.waiting_requests", ("sglang:num_queue_reqs",), Scrape.total),
    _Gauge(f"{METRICS}.running_sequences", ("sglang:num_running_reqs",), Scrape.largest, zero_is_a_figure=False),
    _Gauge("observations.memory.kv_cache_usage", ("sglang:token_usage",), Scrape.largest),
)


def from_window(
    before: Scrape, after: Scrape, gauges: Sequence[Scrape] = (), duration_s: float | None = None
) -> SourcedFacts:
    """The facts of whichever engine the scrapes are of, told apart by the metric prefix."""
    if any(name.startswith("vllm:") for name in after.names):
        return from_vllm_window(before, after, gauges, duration_s)
    if any(name.startswith("sglang:") for name in after.names):
        return from_sglang_window(before, after, gauges, duration_s)
    facts = SourcedFacts()
    facts.missing.append(
        f"{METRICS}: the scrape holds no known serving metrics (vllm:* or sglang:*); scrape the engine's own "
        "/metrics (SGLang serves them only with --enable-metrics)"
    )
    return facts


def from_vllm_window(
    before: Scrape, after: Scrape, gauges: Sequence[Scrape] = (), duration_s: float | None = None
) -> SourcedFacts:
    """vLLM's figures over the load between ``before`` and ``after``; ``duration_s`` is its wall time."""
    _check_duration(duration_s)
    counted, facts = window(before, after), SourcedFacts()
    decoded = counted.total("vllm:generation_tokens_total") or 0
    _idle_window(facts, decoded)
    for path, names in _VLLM_LATENCIES.items():
        _latency(facts, counted, path, names)
    _histogram_mean(facts, counted, f"{METRICS}.output_tokens", "vllm:request_generation_tokens")
    _histogram_mean(facts, counted, f"{METRICS}.input_tokens", "vllm:request_prompt_tokens")
    success = counted.series("vllm:request_success_total")
    completed = sum(v for labels, v in success if labels.get("finished_reason") not in _NOT_COMPLETED)
    _rates(facts, duration_s, decoded, "vllm:generation_tokens_total", completed, "vllm:request_success_total (not aborted)")
    scrapes = [before, *gauges, after]
    _peaks(facts, scrapes, _VLLM_GAUGES, in_load=bool(gauges))
    _kv_waits_unknown(facts)
    _window_count(facts, counted, decoded, "observations.memory.preemptions", "vllm:num_preemptions_total")
    _vllm_speculation(facts, counted, after, decoded)
    return _at_engine(facts)


def from_sglang_window(
    before: Scrape, after: Scrape, gauges: Sequence[Scrape] = (), duration_s: float | None = None
) -> SourcedFacts:
    """SGLang's figures over the load between ``before`` and ``after``; ``duration_s`` is its wall time.

    SGLang has no per-request token histograms by default; its token counters and its end-to-end
    latency histogram are all updated once per finished request, so their window ratios are the
    per-request means.
    """
    _check_duration(duration_s)
    counted, facts = window(before, after), SourcedFacts()
    decoded = counted.total("sglang:generation_tokens_total") or 0
    _idle_window(facts, decoded)
    for path, names in _SGLANG_LATENCIES.items():
        _latency(facts, counted, path, names)
    finished = counted.histogram("sglang:e2e_request_latency_seconds")
    requests = finished.count if finished is not None else 0
    for path, name in (("output_tokens", "sglang:generation_tokens_total"), ("input_tokens", "sglang:prompt_tokens_total")):
        tokens = counted.total(name)
        if tokens is not None and requests > 0:
            facts.add(f"{METRICS}.{path}", tokens / requests, f"/metrics {name} / sglang:e2e_request_latency_seconds_count ({WINDOW})")
    _rates(facts, duration_s, decoded, "sglang:generation_tokens_total", requests, "sglang:e2e_request_latency_seconds_count")
    in_load = [*gauges, after]
    if duration_s is None and decoded > 0:
        _interval_mean(facts, in_load, f"{METRICS}.output_tokens_per_s", "sglang:gen_throughput", Scrape.total)
    _peaks(facts, [before, *in_load], _SGLANG_GAUGES, in_load=bool(gauges))
    _kv_waits_unknown(facts)
    _window_count(facts, counted, decoded, "observations.memory.preemptions", "sglang:num_retracted_requests_total")
    if decoded > 0:  # SGLang's accept length counts each verify's own token with the accepted drafts
        _interval_mean(facts, in_load, f"{_SPEC}.mean_accepted_per_cycle", "sglang:spec_accept_length", _series_mean)
    return _at_engine(facts)


def _check_duration(duration_s: float | None) -> None:
    if duration_s is not None and not duration_s > 0:
        raise InputError(f"the window's wall time must be positive seconds, not {duration_s}")


def _idle_window(facts: SourcedFacts, decoded: float) -> None:
    if decoded <= 0:
        facts.missing.append(
            f"{METRICS}: no token was generated between the two scrapes; take one before the load starts and one after it ends"
        )


def _latency(facts: SourcedFacts, counted: Scrape, path: str, names: tuple[str, ...]) -> None:
    name = next((n for n in names if f"{n}_count" in counted.names), None)
    figure = _ms(counted.histogram(name)) if name is not None else None
    if figure:
        facts.add(f"{METRICS}.{path}", figure, f"/metrics {name} ({WINDOW})")


def _ms(histogram: Histogram | None) -> dict[str, float] | None:
    """Mean and percentiles in ms. A percentile of 0 (a bucket bounded at 0, e.g. no queueing at
    all) is left out: the case holds positive times only, and the mean still says how long it was."""
    if histogram is None:
        return None
    seconds = {"mean": histogram.mean, **{f"p{round(q * 100)}": histogram.quantile(q) for q in (0.5, 0.9, 0.99)}}
    return {k: v * 1e3 for k, v in seconds.items() if v is not None and v > 0} or None


def _histogram_mean(facts: SourcedFacts, counted: Scrape, path: str, name: str) -> None:
    histogram = counted.histogram(name)
    if histogram is not None:
        facts.add(path, histogram.mean, f"/metrics {name} sum/count ({WINDOW})")


def _rates(facts: SourcedFacts, duration_s: float | None, decoded: float, tokens: str, requests: float, requests_from: str) -> None:
    """Counter deltas over the wall time of the window, which no scrape carries: the caller timed it."""
    if decoded <= 0:
        return
    if duration_s is None:
        facts.missing.append(
            f"{METRICS}.output_tokens_per_s, requests_per_s: give the load's wall time (duration_s) to turn the counters into rates"
        )
        return
    facts.add(f"{METRICS}.output_tokens_per_s", decoded / duration_s, f"/metrics {tokens} ({WINDOW}) / {duration_s:g} s")
    if requests > 0:
        facts.add(f"{METRICS}.requests_per_s", requests / duration_s, f"/metrics {requests_from} ({WINDOW}) / {duration_s:g} s")


def _peaks(facts: SourcedFacts, scrapes: Sequence[Scrape], gauges: Sequence[_Gauge], in_load: bool) -> None:
    """The largest value of each gauge. Scrapes taken only before and after the load usually find
    the server idle, so a 0 from them is not evidence that nothing queued."""
    idle = []
    for gauge in gauges:
        name = next((n for n in gauge.names if n in scrapes[-1].names), None)
        values = [v for s in scrapes if (v := gauge.read(s, name)) is not None] if name else []
        peak = max(values, default=None)
        if peak is None:
            continue
        if peak > 0 or (in_load and gauge.zero_is_a_figure):
            facts.add(gauge.path, peak, f"/metrics {name} (largest of {len(values)} scrapes)")
        elif not in_load:
            idle.append(gauge.path)
    if idle:
        facts.missing.append(
            f"{', '.join(idle)}: the scrapes before and after the load found the server idle; pass scrapes taken while it ran (gauges)"
        )


def _kv_waits_unknown(facts: SourcedFacts) -> None:
    """Neither engine says which waiting requests wait for KV space. vLLM's reasons are 'capacity'
    (any scheduling limit: batch slots, token budget or KV blocks) and 'deferred' (LoRA budget, KV
    transfer); SGLang's queue holds every request not yet admitted. So the queue is never memory's."""
    waiting = facts.value(f"{METRICS}.waiting_requests", 0)
    if waiting > 0:
        facts.missing.append(
            f"observations.memory.waiting_requests: {waiting:g} requests waited, but the engine does not say whether for "
            "KV space or a batch slot; KV pressure shows as preemptions and KV-cache usage near 1"
        )


def _window_count(facts: SourcedFacts, counted: Scrape, decoded: float, path: str, name: str) -> None:
    """A count of events over a window in which tokens were generated; there 0 is a measurement
    (the load ran without one), unlike a latency or ratio with nothing to divide."""
    count = counted.total(name)
    if count is not None and decoded > 0:
        facts.add(path, count, f"/metrics {name} ({WINDOW})")


_DRAFTS, _DRAFTED, _ACCEPTED = (f"vllm:spec_decode_num_{n}_total" for n in ("drafts", "draft_tokens", "accepted_tokens"))


def _vllm_speculation(facts: SourcedFacts, counted: Scrape, after: Scrape, decoded: float) -> None:
    """Acceptance from the drafting counters: a draft is one verify cycle of one request, which
    emits its accepted draft tokens and one token of its own. vLLM makes one per-position series
    for each token it may draft, so their number is the configured draft length. Configured, with
    tokens generated in the window and not one drafted, the drafter proposed nothing (an n-gram
    lookup that found no match): every step was an ordinary one, 0 drafts a step."""
    positions = {labels.get("position") for labels, _ in after.series("vllm:spec_decode_num_accepted_tokens_per_pos_total")}
    if positions:
        source = "/metrics vllm:spec_decode_num_accepted_tokens_per_pos_total (one series per draft position)"
        facts.add(f"{_SPEC}.draft_length", len(positions), source)
    exported = counted.total(_DRAFTED)
    drafts, drafted, accepted = counted.total(_DRAFTS) or 0, exported or 0, counted.total(_ACCEPTED) or 0
    if positions and decoded > 0 and exported == 0:
        facts.add(f"{_SPEC}.drafted_per_cycle", 0, f"/metrics {_DRAFTED}: none over {decoded:.0f} tokens generated ({WINDOW})")
    if drafts <= 0 or drafted <= 0:
        return
    facts.add(f"{_SPEC}.acceptance_rate", accepted / drafted, f"/metrics {_ACCEPTED} / {_DRAFTED} ({WINDOW})")
    facts.add(f"{_SPEC}.drafted_per_cycle", drafted / drafts, f"/metrics {_DRAFTED} / {_DRAFTS} ({WINDOW})")
    facts.add(f"{_SPEC}.mean_accepted_per_cycle", 1 + accepted / drafts, f"/metrics 1 + {_ACCEPTED} / {_DRAFTS} ({WINDOW})")


def _interval_mean(
    facts: SourcedFacts, scrapes: Sequence[Scrape], path: str, name: str, read: Callable[[Scrape, str], float | None]
) -> None:
    """A gauge the engine sets to its average over its last logging interval (SGLang logs one
    every few dozen decode steps, and only while decoding, so the scrape after the load still
    holds the load's last interval). Intervals without decoding report 0 and are left out."""
    values = [v for s in scrapes if (v := read(s, name)) is not None and v > 0]
    if values:
        facts.add(path, sum(values) / len(values), f"/metrics {name} (the engine's interval average, mean of {len(values)} scrapes)")


def _series_mean(scrape: Scrape, name: str) -> float | None:
    """A ratio each rank reports for itself: its mean over ranks, where a sum means nothing."""
    values = [value for _, value in scrape.series(name)]
    return sum(values) / len(values) if values else None


def _at_engine(facts: SourcedFacts) -> SourcedFacts:
    if any(path.startswith(f"{METRICS}.") for path in facts.facts):
        facts.add(f"{METRICS}.boundary", "engine", "/metrics (the engine's own counters and gauges)")
    return facts
