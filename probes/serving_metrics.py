"""Client-side serving metrics with vLLM ``bench serve`` definitions, and what they hide.

Definitions (vLLM ``benchmarks/lib/endpoint_request_func.py`` and ``serve.py``), all on
``time.perf_counter`` at the client, from the moment just before the request is sent:

- TTFT: receipt of the first event that carries a choice (its text may be empty);
- ITL: gaps between consecutive choice events, per chunk (not per token), pooled over requests;
- E2EL: receipt of the last choice event;
- TPOT: ``(E2EL - TTFT) / (output_tokens - 1)``, only for requests with more than one token,
  ``output_tokens`` taken from the server's usage.

The same medians look healthy when a proxy or output path releases tokens in bursts, because
the average rate is unchanged; ``bunching`` therefore measures how often chunks arrive almost
together, relative to each request's own mean chunk interval. Percentiles use numpy's linear
interpolation, as vLLM does.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from diagnoser.models.probe_results import Bunching, LatencyStats, ServerTiming
from diagnoser.probes.sse_client import Chunk, StreamedResponse

BUNCH_FRACTION = 0.25  # a gap under a quarter of the request's mean chunk interval is "together"
MIN_GROWTH_SPAN_TOKENS = 100  # below this a per-1k slope is mostly extrapolated noise
REPLICATES = 2  # streams, each long enough for its own slope, needed to judge the slope's noise
# One-sided 99 % Student-t values by degrees of freedom (streams - 1): a mean slope closer to zero
# than this many standard errors is not told apart from the machine's drift. At 95 % one healthy
# server in twenty shows a growth that is not there, and the slope is a cause's only evidence.
# Past ten streams, 2.76 errs on the strict side (the exact value falls towards 2.33).
T_99 = {1: 31.82, 2: 6.96, 3: 4.54, 4: 3.75, 5: 3.36, 6: 3.14, 7: 3.00, 8: 2.90, 9: 2.82, 10: 2.76}


@dataclass(frozen=True)
class RequestMetrics:
    ttft_ms: float
    itl_ms: list[float]
    e2el_ms: float
    output_tokens: int | None
    tpot_ms: float | None


def request_metrics(response: StreamedResponse) -> RequestMetrics:
    times = [c.received_s for c in response.chunks]
    ttft = (times[0] - response.start_s) * 1e3
    e2el = (times[-1] - response.start_s) * 1e3
    n = response.completion_tokens
    return RequestMetrics(
        ttft_ms=ttft,
        itl_ms=[(b - a) * 1e3 for a, b in zip(times, times[1:])],
        e2el_ms=e2el,
        output_tokens=n,
        tpot_ms=(e2el - ttft) / (n - 1) if n and n > 1 else None,
    )


def output_throughput(responses: list[StreamedResponse]) -> float | None:
    """Output tokens per second over the run, first request sent to last chunk received.

    This is the figure a spreadsheet's tokens/s is compared with; it includes prefill and
    the gaps between requests, so it sits below 1/TPOT for one stream.
    """
    tokens = [r.completion_tokens for r in responses]
    if not responses or not all(tokens):
        return None
    duration = max(r.chunks[-1].received_s for r in responses) - min(r.start_s for r in responses)
    return sum(tokens) / duration if duration > 0 else None


def summary(values: list[float]) -> LatencyStats | None:
    """Mean and p50/p90/p99 of latencies in ms; None for no values (JSON has no NaN)."""
    if not values:
        return None
    p50, p90, p99 = np.percentile(np.asarray(values, dtype=float), [50, 90, 99])
    return LatencyStats(n=len(values), mean=float(np.mean(values)), p50=float(p50), p90=float(p90), p99=float(p99))


def content_chunks(response: StreamedResponse) -> list[Chunk]:
    """Chunks that carry generated text (a chat role announcement carries none)."""
    return [c for c in response.chunks if c.text]


def tokens_per_chunk(response: StreamedResponse) -> list[int] | None:
    """Tokens in each content chunk, from cumulative per-chunk usage; None when not sent."""
    counts = [c.completion_tokens for c in content_chunks(response)]
    if not counts or not all(isinstance(n, int) for n in counts):
        return None
    return [b - a for a, b in zip([0, *counts], counts)]


def gaps_ms(chunks: list[Chunk]) -> list[float]:
    return [(b.received_s - a.received_s) * 1e3 for a, b in zip(chunks, chunks[1:])]


def burst_sizes(gaps: list[float]) -> tuple[list[int], int]:
    """Runs of chunks separated by gaps above ``BUNCH_FRACTION`` of the mean gap; and the bunched count.

    A stream read whole in one go (every gap zero, so the threshold is zero too) is one burst.
    """
    if not gaps:
        return [], 0
    threshold = BUNCH_FRACTION * statistics.fmean(gaps)
    sizes, bunched = [1], 0
    for gap in gaps:
        if gap <= threshold:
            sizes[-1] += 1
            bunched += 1
        else:
            sizes.append(1)
    return sizes, bunched


def bunching(responses: list[StreamedResponse]) -> Bunching | None:
    sizes: list[int] = []
    bunched = total = 0
    for response in responses:
        gaps = gaps_ms(content_chunks(response))
        run_sizes, n_bunched = burst_sizes(gaps)
        sizes += run_sizes
        bunched += n_bunched
        total += len(gaps)
    if not total:
        return None
    return Bunching(
        bunched_fraction=bunched / total,
        mean_burst_chunks=statistics.fmean(sizes),
        max_burst_chunks=max(sizes),
        threshold_fraction_of_mean_gap=BUNCH_FRACTION,
    )


def linear_fit(xs: list[float], ys: list[float]) -> dict[str, float] | None:
    """Least-squares line y = slope * x + intercept with r^2; None without two distinct x."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    residual = float(np.sum((y - (slope * x + intercept)) ** 2))
    spread = float(np.sum((y - y.mean()) ** 2))
    return {"slope": float(slope), "intercept": float(intercept), "r2": 1.0 - residual / spread if spread > 0 else 1.0}


def _per_token_gaps(response: StreamedResponse) -> tuple[list[float], list[float]]:
    """(tokens generated before each gap, that gap per token) for one stream."""
    xs, ys = [], []
    chunks = content_chunks(response)
    counts = tokens_per_chunk(response) or [1] * len(chunks)
    done = counts[0] if counts else 0
    for gap, tokens in zip(gaps_ms(chunks), counts[1:]):
        xs.append(done)
        ys.append(gap / max(tokens, 1))
        done += tokens
    return xs, ys


def itl_growth_per_1k_output(responses: list[StreamedResponse]) -> float | None:
    """Slope of per-token interval against tokens already generated, in ms per 1k tokens.

    A short stream's slope is mostly the machine's drift over its few seconds, which a pooled
    fit takes for growth. With two or more streams each is a replicate: the growth is their
    mean slope, reported only when a one-sided t-test at 99 % tells it from zero (None: not resolved);
    a single stream gives its own slope, with nothing to judge its noise by.
    """
    slopes, pooled_x, pooled_y = [], [], []
    for response in responses:
        xs, ys = _per_token_gaps(response)
        pooled_x += xs
        pooled_y += ys
        if xs and max(xs) - min(xs) >= MIN_GROWTH_SPAN_TOKENS:
            fit = linear_fit(xs, ys)
            if fit:
                slopes.append(fit["slope"] * 1e3)
    if len(slopes) >= REPLICATES:
        mean = statistics.fmean(slopes)
        error = statistics.stdev(slopes) / len(slopes) ** 0.5
        return mean if abs(mean) > T_99.get(len(slopes) - 1, 2.76) * error else None
    if not pooled_x or max(pooled_x) - min(pooled_x) < MIN_GROWTH_SPAN_TOKENS:
        return None
    fit = linear_fit(pooled_x, pooled_y)
    return fit["slope"] * 1e3 if fit else None


def server_reconciliation(responses: list[StreamedResponse]) -> ServerTiming | None:
    """Engine step vs server emission vs client receipt, when the server stamps its chunks.

    The receipt-minus-emission lag includes any clock offset, so only its excess over the
    request's smallest lag is reported: that excess is time the chunk spent buffered in the
    output path, proxy or network.
    """
    steps, emissions, receipts, excess = [], [], [], []
    for response in responses:
        chunks = [c for c in content_chunks(response) if c.emitted_ns is not None]
        if len(chunks) < 2:
            continue
        steps += [c.step_ms for c in chunks[1:] if c.step_ms is not None]  # the first is prefill
        emissions += [(b.emitted_ns - a.emitted_ns) / 1e6 for a, b in zip(chunks, chunks[1:])]
        receipts += gaps_ms(chunks)
        lags = [(c.received_ns - c.emitted_ns) / 1e6 for c in chunks]
        excess += [lag - min(lags) for lag in lags]
    if not emissions:
        return None
    p50, p99 = np.percentile(excess, [50, 99])
    return ServerTiming(
        device_step_ms=statistics.median(steps) if steps else None,
        server_emission_ms=statistics.median(emissions),
        client_receipt_ms=statistics.median(receipts),
        buffered_p50_ms=float(p50),
        buffered_p99_ms=float(p99),
    )
