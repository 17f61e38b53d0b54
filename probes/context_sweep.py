"""Context sweep: the same output length at controlled prompt lengths, and the step-time slope.

Decode steps that slow down as the context grows point at KV-cache (or indexer) traffic and
attention work rather than weights; a flat line clears them. Prompts are sent as token-id
lists to ``/v1/completions`` so their length is exact without a tokenizer, with fresh random
ids per request so a prefix cache cannot shortcut the prefill that TTFT measures.

Each repeat is a pass over all lengths, alternately shortest and longest first, so drift
over the sweep does not read as growth. Each point's step time is the median TPOT (vLLM
definition) over the repeats. TPOT averages the steps that produced tokens 2..n, whose
contexts run from prompt+1 to prompt+n-1, so the point is placed at the mean decode context,
prompt + n/2. The slope is a least-squares line
through the points, in ms per 1k tokens of context.

Options read from ``ctx.options``: ``endpoint`` (required), ``model_name``,
``context_lengths`` (prompt lengths, default 256..8192), ``sweep_output_tokens`` (64),
``sweep_repeats`` (2), ``ignore_eos`` and ``per_chunk_usage`` (as for the client probe).
"""

from __future__ import annotations

import random
import statistics
from typing import Any

from diagnoser.errors import InputError
from diagnoser.models.observations import ContextPoint
from diagnoser.models.probe_results import ContextSweepFacts, ContextSweepPoint
from diagnoser.probes.base import ProbeContext
from diagnoser.probes.client import bounded_int, open_session, stream_bounded
from diagnoser.probes.serving_metrics import linear_fit, request_metrics
from diagnoser.probes.sse_client import request_body

DEFAULT_CONTEXTS = (256, 1024, 2048, 4096, 8192)
MAX_PROMPT = 262_144
TOKEN_IDS = (1000, 20000)  # ordinary ids inside any real vocabulary, clear of special tokens


def prompt_ids(length: int, repeat: int) -> list[int]:
    """Deterministic, and different for every (length, repeat), so no two prompts share a prefix."""
    rng = random.Random(f"{length}:{repeat}")
    return [rng.randrange(*TOKEN_IDS) for _ in range(length)]


def mean_decode_context(prompt_tokens: int, output_tokens: int) -> float:
    return prompt_tokens + output_tokens / 2


def pass_order(lengths: list[int], repeat: int) -> list[int]:
    """Shortest first on even passes, longest first on odd ones: a machine that drifts slower
    (or faster) over the sweep then loads every length alike, instead of posing as growth."""
    return lengths if repeat % 2 == 0 else lengths[::-1]


def prompt_lengths(options: dict[str, Any]) -> list[int]:
    lengths = sorted({int(n) for n in options.get("context_lengths", DEFAULT_CONTEXTS)})
    if len(lengths) < 2 or not all(1 <= n <= MAX_PROMPT for n in lengths):
        raise InputError(f"context_lengths: need two or more distinct prompt lengths in 1..{MAX_PROMPT}, got {lengths}")
    return lengths


def run(ctx: ProbeContext) -> ContextSweepFacts:
    lengths = prompt_lengths(ctx.options)
    output = bounded_int(ctx.options, "sweep_output_tokens", 64, 2, 4096)
    repeats = bounded_int(ctx.options, "sweep_repeats", 2, 1, 20)
    points = []
    with open_session(ctx, "completions") as (http, url, model):
        streamed: dict[int, list] = {length: [] for length in lengths}
        for r in range(repeats):
            for length in pass_order(lengths, r):
                body = request_body("completions", model, prompt_ids(length, r), output, ctx.options)
                streamed[length].append(stream_bounded(ctx, http, url, body))
        for length in lengths:
            responses = streamed[length]
            metrics = [request_metrics(r) for r in responses]
            tpots = [m.tpot_ms for m in metrics if m.tpot_ms is not None]
            if not tpots:
                raise InputError(f"{url}: a {length}-token prompt produced fewer than 2 counted tokens; TPOT undefined")
            prompt = responses[0].prompt_tokens or length
            produced = statistics.median(m.output_tokens for m in metrics if m.output_tokens)
            points.append(
                ContextSweepPoint(
                    prompt_tokens=prompt,
                    output_tokens=produced,
                    context=mean_decode_context(prompt, produced),
                    step_ms=statistics.median(tpots),
                    ttft_ms=statistics.median(m.ttft_ms for m in metrics),
                )
            )
    step = linear_fit([p.context / 1e3 for p in points], [p.step_ms for p in points])
    prefill = linear_fit([p.prompt_tokens / 1e3 for p in points], [p.ttft_ms for p in points])
    return ContextSweepFacts(
        endpoint=url,
        model=model,
        repeats=repeats,
        points=points,
        step_ms_per_1k_context=step["slope"] if step else None,
        step_intercept_ms=step["intercept"] if step else None,
        step_fit_r2=step["r2"] if step else None,
        ttft_ms_per_1k_prompt=prefill["slope"] if prefill else None,
    )


def to_observations(facts: ContextSweepFacts) -> dict[str, Any]:
    points = [ContextPoint(context=round(p.context), step_ms=p.step_ms) for p in facts.points]
    return {"context_sweep": points} if points else {}
