"""Context sweep against the real streaming test server, which slows down with context."""

from __future__ import annotations

import pytest
from streaming_server import DecodeConfig, StreamingServer

from diagnoser.errors import InputError
from diagnoser.models.observations import ContextPoint
from diagnoser.probes import context_sweep
from diagnoser.probes.base import ProbeContext


def test_prompts_are_exact_and_never_share_a_prefix():
    short, long_ = context_sweep.prompt_ids(100, 0), context_sweep.prompt_ids(300, 0)
    assert len(short) == 100 and len(long_) == 300
    assert short[:10] != long_[:10]
    assert context_sweep.prompt_ids(100, 0) == short  # deterministic
    assert context_sweep.prompt_ids(100, 1)[:10] != short[:10]
    # TPOT covers tokens 2..n, produced at contexts prompt+1 .. prompt+n-1: mean prompt + n/2
    assert context_sweep.mean_decode_context(1000, 12) == 1006


def test_too_few_lengths_is_an_input_error():
    with pytest.raises(InputError, match="two or more"):
        context_sweep.run(ProbeContext(options={"endpoint": "http://127.0.0.1:1", "context_lengths": [512, 512]}))


def test_sweep_recovers_injected_slope():
    # step(token i) = 8 ms + 3 ms per 1k of (prompt + i - 1); prefill = 2 ms + 20 ms per 1k prompt.
    config = DecodeConfig(step_ms=8, step_ms_per_1k_context=3, prefill_ms=2, prefill_ms_per_1k_prompt=20)
    with StreamingServer(config) as url:
        facts = context_sweep.run(
            ProbeContext(
                timeout_s=60,
                options={"endpoint": url, "context_lengths": [200, 2000, 4000, 6000], "sweep_output_tokens": 12, "sweep_repeats": 1},
            )
        )
    assert [p.prompt_tokens for p in facts.points] == [200, 2000, 4000, 6000]
    assert [p.context for p in facts.points] == [206, 2006, 4006, 6006]
    # hand-worked: at prompt 6000 the mean step is 8 + 3 * 6.006 = 26.02 ms
    assert facts.points[-1].step_ms == pytest.approx(26.02, rel=0.1)
    assert facts.step_ms_per_1k_context == pytest.approx(3.0, rel=0.1)
    assert facts.step_intercept_ms == pytest.approx(8.0, rel=0.2)
    assert facts.step_fit_r2 > 0.95
    # TTFT also pays for sending and parsing the longer prompt, so its slope is at least prefill's
    assert facts.ttft_ms_per_1k_prompt >= 20.0 * 0.9
    points = context_sweep.to_observations(facts)["context_sweep"]
    assert points[0] == ContextPoint(context=206, step_ms=facts.points[0].step_ms)
