"""Client-gap probe: what a streaming client of the server actually receives.

A device step can be fast while users still see slow tokens: detokenisation and output
processing, an HTTP proxy that buffers, or chunking all sit between the engine and the
client. This probe streams a few fixed-length requests, by default one at a time (a single
user, the regime a per-sequence decode bound describes; ``concurrency`` runs several at
once), and reports TTFT, TPOT, ITL and E2EL as vLLM ``bench serve`` defines them, output
tokens/s, tokens per chunk, how bunched the arrivals are, and, when the server stamps its
chunks (see ``sse_client``), engine step vs server emission vs client receipt.

Options read from ``ctx.options``: ``endpoint`` (required), ``model_name`` (default: the
first model the server lists), ``api`` (``completions`` or ``chat``), ``prompt``,
``max_tokens`` (128), ``requests`` (3), ``concurrency`` (1), ``ignore_eos`` and
``per_chunk_usage`` (true; see ``sse_client.request_body``). ``OPENAI_API_KEY``, when set,
is sent as the bearer token.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from diagnoser.errors import InputError
from diagnoser.http import Client
from diagnoser.models.observations import BoundaryTimings, HostObs
from diagnoser.models.runtime import BURSTY_FRACTION, StreamObs
from diagnoser.models.probe_results import ClientFacts, LatencyStats
from diagnoser.probes import serving_metrics as sm
from diagnoser.probes.base import ProbeContext, ProbeSkipped
from diagnoser.probes.sse_client import StreamedResponse, api_url, request_body, served_model, stream
from diagnoser.probes.wakeup import WakeupMonitor

DEFAULT_PROMPT = "Describe, step by step, how a decode step on a GPU reads the model weights and the KV cache."
MAX_REQUESTS = 100
MAX_CONCURRENCY = 64
MAX_TOKENS = 4096


def bounded_int(options: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    try:
        value = int(options.get(key, default))
    except (TypeError, ValueError):
        raise InputError(f"{key} must be an integer, got {options.get(key)!r}") from None
    if not low <= value <= high:
        raise InputError(f"{key} must be {low}..{high}, got {value}")
    return value


@contextmanager
def open_session(ctx: ProbeContext, api: str) -> Iterator[tuple[Client, str, str]]:
    """An HTTP client, the request URL and the model name, or a skip when no endpoint is set."""
    endpoint = ctx.options.get("endpoint")
    if not endpoint:
        raise ProbeSkipped("no endpoint given (pass --endpoint URL of an OpenAI-compatible server)")
    url = api_url(str(endpoint), api)
    # Servers started with an API key want it on every request, as vLLM's own benchmark sends it.
    key = os.environ.get("OPENAI_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else None
    with Client(str(endpoint), timeout_s=ctx.timeout_s, deadline=ctx.deadline, headers=headers) as client:
        model = ctx.options.get("model_name") or served_model(client, str(endpoint))
        yield client, url, str(model)


def stream_bounded(ctx: ProbeContext, client: Client, url: str, body: dict[str, Any]) -> StreamedResponse:
    """One request, stopping at the probe's deadline."""
    ctx.check_deadline()
    return stream(client, url, body, min(ctx.timeout_s, ctx.remaining_s()))


def mean_tokens_per_chunk(responses: list[StreamedResponse]) -> tuple[float | None, str]:
    """Mean tokens per content chunk, and where the counts came from."""
    per_request = [sm.tokens_per_chunk(r) for r in responses]
    if all(counts is not None for counts in per_request):
        return statistics.fmean(n for counts in per_request for n in counts), "per-chunk usage"
    tokens = [r.completion_tokens for r in responses]
    chunks = sum(len(sm.content_chunks(r)) for r in responses)
    if all(tokens) and chunks:
        return sum(tokens) / chunks, "final usage / content chunks"
    return None, "unknown: the server sent no usage"


def run(ctx: ProbeContext) -> ClientFacts:
    api = str(ctx.options.get("api", "completions"))
    requests = bounded_int(ctx.options, "requests", 3, 1, MAX_REQUESTS)
    max_tokens = bounded_int(ctx.options, "max_tokens", 128, 2, MAX_TOKENS)
    concurrency = bounded_int(ctx.options, "concurrency", 1, 1, MAX_CONCURRENCY)
    with open_session(ctx, api) as (client, url, model), ThreadPoolExecutor(concurrency) as pool, WakeupMonitor() as wake:
        body = request_body(api, model, ctx.options.get("prompt", DEFAULT_PROMPT), max_tokens, ctx.options)
        responses = list(pool.map(lambda _: stream_bounded(ctx, client, url, body), range(requests)))
    return client_facts(responses, url, api, model, concurrency, max_tokens, wake.p99_ms(), wake.stalled_share())


def client_facts(responses: list[StreamedResponse], url: str, api: str, model: str, concurrency: int, max_tokens: int,
                 client_delay_p99_ms: float | None = None, client_stalled_share: float | None = None) -> ClientFacts:
    """What the streams received, with vLLM bench serve's definitions (shared with ``diagnoser live``)."""
    metrics = [sm.request_metrics(r) for r in responses]
    per_chunk, source = mean_tokens_per_chunk(responses)
    tpot = sm.summary([m.tpot_ms for m in metrics if m.tpot_ms is not None])
    return ClientFacts(
        endpoint=url,
        api=api,
        model=model,
        requests=len(responses),
        concurrency=concurrency,
        max_tokens=max_tokens,
        definitions="vLLM bench serve: TTFT/E2EL to first/last choice event, ITL per chunk, TPOT=(E2EL-TTFT)/(tokens-1)",
        output_tokens=[m.output_tokens for m in metrics],
        ttft_ms=sm.summary([m.ttft_ms for m in metrics]),
        tpot_ms=tpot,
        itl_ms=sm.summary([gap for m in metrics for gap in m.itl_ms]),
        e2el_ms=sm.summary([m.e2el_ms for m in metrics]),
        output_throughput_tok_s=sm.output_throughput(responses),
        per_user_tok_s=1e3 / tpot.mean if tpot else None,
        tokens_per_chunk=per_chunk,
        tokens_per_chunk_source=source,
        bunching=sm.bunching(responses),
        itl_growth_ms_per_1k_output=sm.itl_growth_per_1k_output(responses),
        server_timing=sm.server_reconciliation(responses),
        client_delay_p99_ms=client_delay_p99_ms,
        client_stalled_share=client_stalled_share,
        stream_encoding=next((r.content_encoding for r in responses if r.content_encoding not in ("", "identity")), None),
    )


def _positive(value: float | None) -> float | None:
    return value if value is not None and value > 0 else None


def _p50(stats: LatencyStats | None) -> float | None:
    return _positive(stats.p50) if stats else None


def is_bursty(facts: ClientFacts) -> bool:
    return facts.bunching is not None and facts.bunching.bunched_fraction >= BURSTY_FRACTION


def to_observations(facts: ClientFacts) -> dict[str, Any]:
    """Boundary timings for the device/server/client comparison, the ITL spike ratio, and the stream's bursts.

    A bursty stream's median gap is a read pattern, not a token time: it is left out of the
    per-token figures (the server's metrics or a trace give those) and said as a stream fact.
    The worst gaps still are what the user waited, so the p99 stays.
    """
    server = facts.server_timing
    bursty = is_bursty(facts)
    itl_p50, itl_p99 = _p50(facts.itl_ms), _positive(facts.itl_ms.p99) if facts.itl_ms else None
    typical = None if bursty else itl_p50
    updates: dict[str, Any] = {
        "boundaries": BoundaryTimings(
            device_step_ms=_positive(server.device_step_ms) if server else None,
            server_emission_ms=_positive(server.server_emission_ms) if server else None,
            client_receipt_ms=(_positive(server.client_receipt_ms) if server and not bursty else None) or typical,
            client_p50_ms=typical,
            client_p99_ms=itl_p99,
            buffered_p99_ms=server.buffered_p99_ms if server else None,
            tokens_per_chunk=_positive(facts.tokens_per_chunk),
            client_delay_p99_ms=facts.client_delay_p99_ms,
            client_stalled_share=facts.client_stalled_share,
            ttft_ms=_p50(facts.ttft_ms),
            itl_growth_ms_per_1k_output=facts.itl_growth_ms_per_1k_output,
        )
    }
    if typical and itl_p99:
        updates["host"] = HostObs(itl_spike_ratio=itl_p99 / typical)
    if facts.bunching is not None:
        updates["stream"] = StreamObs(
            bursty=bursty,
            near_zero_gap_fraction=facts.bunching.bunched_fraction,
            tokens_per_burst=facts.bunching.mean_burst_chunks * (facts.tokens_per_chunk or 1.0) if bursty else None,
            compressed=facts.stream_encoding is not None,
        )
    return updates
