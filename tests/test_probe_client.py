"""Client-gap probe against a real streaming HTTP server, and its metrics by hand."""

from __future__ import annotations

import json
import socket
import time

import pytest
from conftest import run_cli
from streaming_server import DecodeConfig, StreamingServer

from diagnoser.models.case import load_case

from diagnoser.errors import InputError
from diagnoser.models.observations import BoundaryTimings
from diagnoser.models.probe_results import ClientFacts
from diagnoser.probes import client
from diagnoser.probes import serving_metrics as sm
from diagnoser.probes.base import ProbeContext, ProbeSkipped
from diagnoser.http import Client
from diagnoser.probes.sse_client import Chunk, StreamedResponse, api_url, request_body, stream


def probe(url: str, **options) -> ClientFacts:
    return client.run(ProbeContext(timeout_s=60, options={"endpoint": url, **options}))


def response(start: float, times: list[float], tokens: int | None, texts: list[str] | None = None) -> StreamedResponse:
    texts = texts or ["x"] * len(times)
    chunks = [Chunk(received_s=t, received_ns=int(t * 1e9), text=x) for t, x in zip(times, texts)]
    return StreamedResponse(start_s=start, chunks=chunks, completion_tokens=tokens)


def test_vllm_definitions_by_hand():
    # Sent at 10.0 s; choice events at 10.1 (role only), 10.12, 10.15, 10.30 s; 4 tokens.
    r = response(10.0, [10.1, 10.12, 10.15, 10.30], tokens=4, texts=["", "a", "b", "c"])
    m = sm.request_metrics(r)
    assert m.ttft_ms == pytest.approx(100.0)  # first choice event, even with empty text
    assert m.itl_ms == pytest.approx([20.0, 30.0, 150.0])
    assert m.e2el_ms == pytest.approx(300.0)
    assert m.tpot_ms == pytest.approx((300.0 - 100.0) / 3)
    assert sm.request_metrics(response(0.0, [0.5], tokens=1)).tpot_ms is None


def test_summary_uses_linear_percentiles():
    s = sm.summary([1.0, 2.0, 3.0, 4.0])
    # linear interpolation: p50 at rank 1.5 -> 2.5; p90 at 2.7 -> 3.7; p99 at 2.97 -> 3.97
    assert (s.mean, s.p50, s.p90, s.p99) == pytest.approx((2.5, 2.5, 3.7, 3.97)) and s.n == 4
    assert sm.summary([]) is None


def test_bursts_by_hand():
    # six chunks, five gaps; mean gap = 12.2/5 = 2.44 ms, threshold 0.61 ms: two bursts of three
    sizes, bunched = sm.burst_sizes([0.1, 0.1, 11.8, 0.1, 0.1])
    assert sizes == [3, 3] and bunched == 4
    assert sm.burst_sizes([10.0, 9.0, 11.0]) == ([1, 1, 1, 1], 0)
    # a stream that arrived in one read: every gap zero, all four chunks one burst
    assert sm.burst_sizes([0.0, 0.0, 0.0]) == ([4], 3)


def test_linear_fit_by_hand():
    fit = sm.linear_fit([0.0, 1.0, 2.0], [1.0, 3.0, 5.0])
    assert fit == pytest.approx({"slope": 2.0, "intercept": 1.0, "r2": 1.0})
    assert sm.linear_fit([1.0, 1.0], [2.0, 3.0]) is None


def test_endpoint_forms_normalise():
    for form in ("http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/completions"):
        assert api_url(form, "chat") == "http://h:8000/v1/chat/completions"
    with pytest.raises(InputError, match="http"):
        api_url("localhost:8000", "completions")


def test_vllm_extensions_can_be_turned_off_for_strict_servers():
    body = request_body("chat", "m", "hi", 5, {})
    assert body["ignore_eos"] is True and body["stream_options"]["continuous_usage_stats"] is True
    assert body["messages"] == [{"role": "user", "content": "hi"}] and body["stream"] is True
    strict = request_body("completions", "m", [1, 2], 5, {"ignore_eos": False, "per_chunk_usage": False})
    assert "ignore_eos" not in strict and strict["stream_options"] == {"include_usage": True}
    assert strict["prompt"] == [1, 2]


def test_steady_stream_recovers_inter_token_delay():
    with StreamingServer(DecodeConfig(step_ms=20, prefill_ms=40)) as url:
        facts = probe(url, max_tokens=25, requests=2)
    assert facts.model == "toy-decoder"  # discovered from /v1/models
    assert facts.output_tokens == [25, 25]
    assert facts.tpot_ms.p50 == pytest.approx(20.0, rel=0.1)
    assert facts.itl_ms.p50 == pytest.approx(20.0, rel=0.15)
    assert facts.itl_ms.n == 2 * 24
    assert facts.ttft_ms.p50 >= 40.0
    # one stream: 25 tokens in about 40 + 24 * 20 = 520 ms -> about 48 tokens/s; 1/TPOT = 50
    assert facts.output_throughput_tok_s == pytest.approx(25 / 0.52, rel=0.15)
    assert facts.per_user_tok_s == pytest.approx(50.0, rel=0.1)
    assert facts.tokens_per_chunk == 1.0 and facts.tokens_per_chunk_source == "per-chunk usage"
    assert facts.bunching.bunched_fraction < 0.25  # the fault below gives 0.75
    assert facts.server_timing is None
    b = client.to_observations(facts)["boundaries"]
    assert isinstance(b, BoundaryTimings) and b.device_step_ms is None
    assert b.client_receipt_ms == pytest.approx(20.0, rel=0.15)


def test_buffering_fault_shows_as_bursts_and_is_located_after_emission():
    step = 10.0
    with StreamingServer(DecodeConfig(step_ms=step, prefill_ms=5, burst=4, server_timing=True)) as url:
        facts = probe(url, max_tokens=33, requests=2)
    # Tokens 1-4, 5-8, ... leave together: within a burst chunks arrive ~0 ms apart, between
    # bursts 4 steps apart. Per request 32 gaps, 24 of them inside a burst.
    # A client stalled on the busy host reads several bursts (or a whole stream) at once, which
    # can only raise the share; nothing splits a burst, so it cannot fall below 24 of 32.
    bunching = facts.bunching
    assert 24 / 32 - 0.1 <= bunching.bunched_fraction <= 1.0
    # bursts of 4, 4, ..., 4, 1 (mean 3.56); a stalled client may merge two, never split one
    assert bunching.max_burst_chunks >= 4 and 3 <= bunching.mean_burst_chunks <= 6
    assert facts.itl_ms.p50 < 0.25 * step
    assert facts.itl_ms.p90 == pytest.approx(4 * step, rel=0.25)
    # the engine and the server's emission kept the true pace; only receipt is bunched
    server = facts.server_timing
    assert server.device_step_ms == pytest.approx(step)
    assert server.server_emission_ms == pytest.approx(step, rel=0.15)
    assert server.client_receipt_ms < 0.25 * step
    assert server.buffered_p99_ms >= 2 * step
    updates = client.to_observations(facts)
    assert updates["boundaries"].device_step_ms == pytest.approx(step)
    # the median gap is a burst's read pattern, not a token time: no per-token figure or spike ratio from it
    assert updates["stream"].bursty and updates["stream"].near_zero_gap_fraction == bunching.bunched_fraction
    assert updates["boundaries"].client_receipt_ms is None and "host" not in updates
    assert updates["boundaries"].client_p99_ms >= 2 * step
    # the rule base, given only what the probe measured, points past the server at buffering
    from diagnoser.engine import diagnose, load_rulebook
    from diagnoser.models.case import Case
    from diagnoser.models.observations import Observations

    found = diagnose(Case(observations=Observations(boundaries=updates["boundaries"])), load_rulebook())
    fired = [h.rule for h in found.hypotheses if h.kind == "cause"]
    assert fired[:2] == ["proxy-buffering", "client-gap"]  # the refinement explains the gap and leads it
    assert "server-output-processing" not in fired


def test_chat_stream_with_coalesced_tokens():
    step = 10.0
    config = DecodeConfig(step_ms=step, prefill_ms=5, stream_interval=3, reasoning_tokens=9)
    with StreamingServer(config) as url:
        facts = probe(url, api="chat", model_name="toy-decoder", max_tokens=30, requests=2)
    assert facts.endpoint.endswith("/v1/chat/completions")
    assert facts.tokens_per_chunk == 3.0
    # 10 content chunks (3 of reasoning) plus the role announcement: 10 gaps per request, one ~0
    assert facts.itl_ms.n == 2 * 10
    assert facts.tpot_ms.p50 == pytest.approx(step, rel=0.15)
    assert facts.itl_ms.p50 == pytest.approx(3 * step, rel=0.2)


def test_on_chunk_counts_generated_chunks_as_they_arrive():
    """A caller can act at a point in the stream (the lab sends its long prompt at the eighth token):
    the hook sees each generated chunk once, in order, before the stream ends, and not the role
    announcement or the final usage event."""
    seen: list[tuple[int, float]] = []
    config = DecodeConfig(step_ms=20, prefill_ms=5, stream_interval=3)
    with StreamingServer(config) as url, Client(url) as http:
        body = request_body("chat", "toy-decoder", "hi", 12, {})
        response = stream(http, api_url(url, "chat"), body, 60, on_chunk=lambda n: seen.append((n, time.perf_counter())))
    content = [c for c in response.chunks if c.text]
    assert len(content) == 4  # 12 tokens in chunks of 3
    assert [n for n, _ in seen] == list(range(1, len(response.chunks) + 1))
    assert all(at >= chunk.received_s for (_, at), chunk in zip(seen, response.chunks))
    assert seen[0][1] < content[-1].received_s  # called as the stream went, 3 steps (60 ms) before its end


def test_tokens_per_chunk_falls_back_to_final_usage():
    with StreamingServer(DecodeConfig(step_ms=2, prefill_ms=1, stream_interval=2, per_chunk_usage=False)) as url:
        facts = probe(url, max_tokens=10, requests=1)
    assert facts.output_tokens == [10]
    assert (facts.tokens_per_chunk, facts.tokens_per_chunk_source) == (2.0, "final usage / content chunks")


def test_concurrent_streams_multiply_throughput_not_per_user_rate():
    # one 20-token stream takes at least 5 + 19 * 10 = 195 ms: at most 102.6 tokens/s. Four
    # requests two at a time run two rounds, so close to twice that (205 tokens/s) and never more.
    with StreamingServer(DecodeConfig(step_ms=10, prefill_ms=5)) as url:
        facts = probe(url, max_tokens=20, requests=4, concurrency=2)
    assert facts.output_tokens == [20] * 4
    single_stream = 20 / 0.195
    assert 1.4 * single_stream < facts.output_throughput_tok_s <= 2 * single_stream
    assert facts.per_user_tok_s == pytest.approx(100.0, rel=0.15)


def test_itl_growth_with_tokens_already_generated():
    # step(token i) = 2 ms + 50 ms per 1k of (prompt + i - 1): the interval grows 50 ms per 1k
    # generated tokens; 120 tokens span enough of it to fit (at least 100 are needed)
    with StreamingServer(DecodeConfig(step_ms=2, step_ms_per_1k_context=50, prefill_ms=1)) as url:
        facts = probe(url, prompt="short", max_tokens=120, requests=1)
        short = probe(url, prompt="short", max_tokens=60, requests=1)
    assert facts.itl_growth_ms_per_1k_output == pytest.approx(50.0, rel=0.2)
    assert short.itl_growth_ms_per_1k_output is None


def test_api_key_from_the_environment(monkeypatch):
    with StreamingServer(DecodeConfig(step_ms=1, prefill_ms=1, api_key="sk-test")) as url:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        with pytest.raises(InputError, match="HTTP 401: invalid API key"):
            probe(url, model_name="m", max_tokens=4, requests=1)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        assert probe(url, model_name="m", max_tokens=4, requests=1).output_tokens == [4]


def test_bad_option_values_are_input_errors():
    with pytest.raises(InputError, match="requests must be an integer"):
        probe("http://127.0.0.1:1", requests="many")
    with pytest.raises(InputError, match="max_tokens must be 2..4096"):
        probe("http://127.0.0.1:1", max_tokens=1)


def test_no_endpoint_is_a_skip():
    with pytest.raises(ProbeSkipped, match="no endpoint"):
        client.run(ProbeContext(options={}))


def test_refused_connection_is_one_line_input_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(InputError, match="cannot connect") as err:
        probe(f"http://127.0.0.1:{port}", model_name="m")
    assert "\n" not in str(err.value)


def test_http_errors_and_truncated_streams_are_input_errors():
    with StreamingServer(DecodeConfig(step_ms=1, truncate_after=3)) as url:
        with pytest.raises(InputError, match="malformed stream event"):
            probe(url, max_tokens=10, requests=1)
        with pytest.raises(InputError, match="HTTP 404"):
            probe(url + "/v2", model_name="m")
    with StreamingServer(DecodeConfig(step_ms=1, error_after=2)) as url:
        with pytest.raises(InputError, match="server error in stream: engine died"):
            probe(url, max_tokens=10, requests=1)


def test_cli_probe_feeds_the_case_file(tmp_path):
    case = tmp_path / "case.yaml"  # none yet: created where named
    options = ["max_tokens=6", "requests=1", "context_lengths=[16, 64]", "sweep_output_tokens=4", "sweep_repeats=1"]
    with StreamingServer(DecodeConfig(step_ms=5, prefill_ms=1, server_timing=True)) as url:
        done = run_cli(
            "probe", "--only", "client,context_sweep", "--endpoint", url, "--json", "--case", str(case),
            *[arg for option in options for arg in ("--option", option)],
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().endswith(f"wrote the probe results to a new case {case}")
    report = json.loads(done.stdout)
    assert [(r["name"], r["status"]) for r in report["results"]] == [("client", "ok"), ("context_sweep", "ok")]
    observations = load_case(case).observations
    assert observations.boundaries.device_step_ms == pytest.approx(5.0)  # the server's scheduled step
    assert observations.boundaries.tokens_per_chunk == 1.0
    assert [p.context for p in observations.context_sweep] == [18, 66]


def _stream_with_slope(slope_ms_per_1k: float, base_ms: float = 10.0, tokens: int = 200):
    from diagnoser.probes.sse_client import Chunk, StreamedResponse

    response, t = StreamedResponse(start_s=0.0), 0.0
    for i in range(tokens):
        response.chunks.append(Chunk(received_s=t, received_ns=int(t * 1e9), text="x"))
        t += (base_ms + slope_ms_per_1k * i / 1e3) / 1e3
    return response


def test_itl_growth_needs_the_streams_to_agree():
    """Each stream is a replicate: drift that goes up in one stream and down in the next is not
    growth; a slope every stream shows is, at its mean."""
    from diagnoser.probes.serving_metrics import itl_growth_per_1k_output

    assert itl_growth_per_1k_output([_stream_with_slope(6.0), _stream_with_slope(-5.0)]) is None
    agreed = itl_growth_per_1k_output([_stream_with_slope(20.0), _stream_with_slope(22.0), _stream_with_slope(24.0)])
    assert agreed == pytest.approx(22.0, rel=1e-3)
    assert itl_growth_per_1k_output([_stream_with_slope(6.0)]) == pytest.approx(6.0, rel=1e-3)  # one stream: its own slope
