"""The /metrics window reader on real vLLM 0.32 recordings, checked against figures worked out by hand."""

import re
from pathlib import Path

import pytest

from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.readers import prometheus
from diagnoser.readers.facts import apply_facts
from diagnoser.readers.prometheus import Histogram, bucket_quantile, parse_scrape, window
from diagnoser.readers.serving_metrics import from_sglang_window, from_vllm_window, from_window

DATA = Path(__file__).parent / "data" / "vllm"
HEALTHY = DATA / "healthy"
# a second server: ngram speculation (8 draft tokens), penalties, max-num-seqs 2; after.txt closes a
# load of 4 requests that queued behind 2 slots, after_spec.txt a later load on which ngram drafted
VARIANTS = DATA / "variants"
needs_variants = pytest.mark.skipif(not (VARIANTS / "metrics_after_spec.txt").exists(), reason="variants recording not present")


def scrape(path: Path) -> prometheus.Scrape:
    return parse_scrape(path.read_text())


def line_value(path: Path, sample: str) -> float:
    """The value of one sample line, read with a regex rather than the parser under test."""
    found = re.search(rf"^{re.escape(sample)}(?:\{{[^}}]*\}})? (\S+)$", path.read_text(), re.MULTILINE)
    assert found, sample
    return float(found.group(1))


def window_of(folder: Path, before: str, after: str, sample: str) -> float:
    return line_value(folder / after, sample) - line_value(folder / before, sample)


def healthy(**kwargs):
    return from_vllm_window(scrape(HEALTHY / "metrics_before.txt"), scrape(HEALTHY / "metrics_after.txt"), **kwargs)


# --- the healthy recording -------------------------------------------------------------------------


def test_healthy_itl_mean_is_the_windowed_sum_over_the_windowed_count():
    name = "vllm:inter_token_latency_seconds"
    by_hand = window_of(HEALTHY, "metrics_before.txt", "metrics_after.txt", f"{name}_sum") / window_of(
        HEALTHY, "metrics_before.txt", "metrics_after.txt", f"{name}_count"
    )
    facts = healthy()
    assert facts.value("observations.metrics.itl_ms")["mean"] == pytest.approx(by_hand * 1e3)
    assert facts.facts["observations.metrics.itl_ms"].source == f"/metrics {name} (window of 2 scrapes)"
    assert by_hand * 1e3 == pytest.approx(7.5922, abs=1e-3)  # 7.744 s over 1020 gaps, not the lifetime's 8.464 s / 1083


def test_healthy_figures_per_request_and_over_the_load():
    facts = healthy(duration_s=10.0)
    assert facts.value("observations.metrics.output_tokens") == 256  # 4 streams of 256 tokens
    assert facts.value("observations.metrics.input_tokens") == 57
    generated = window_of(HEALTHY, "metrics_before.txt", "metrics_after.txt", "vllm:generation_tokens_total")
    assert facts.value("observations.metrics.output_tokens_per_s") == pytest.approx(generated / 10.0) == 102.4
    assert facts.value("observations.metrics.requests_per_s") == pytest.approx(0.4)
    assert facts.value("observations.metrics.boundary") == "engine"
    assert facts.value("observations.memory.preemptions") == 0  # the load ran, and nothing was preempted


def test_percentiles_only_where_the_buckets_bound_them():
    itl = healthy().value("observations.metrics.itl_ms")
    # 748 of the 1020 gaps fall in the lowest bucket (up to 10 ms): its median is not known
    assert "p50" not in itl
    assert 10 < itl["p90"] < itl["p99"] < 25
    queue = healthy().value("observations.metrics.queue_ms")
    # Prometheus would say p50 = 150 ms (half of the 0.3 s lowest bucket) over a mean of 0.03 ms
    assert set(queue) == {"mean"} and queue["mean"] < 0.1


def test_every_window_applies_to_a_case():
    pairs = [(HEALTHY, "metrics_before.txt", "metrics_after.txt")]
    if (VARIANTS / "metrics_after_spec.txt").exists():
        pairs += [(VARIANTS, "metrics_before.txt", "metrics_after.txt"), (VARIANTS, "metrics_after.txt", "metrics_after_spec.txt")]
    for folder, before, after in pairs:
        facts = from_window(scrape(folder / before), scrape(folder / after), duration_s=5.0)
        case = apply_facts(Case(), facts)
        assert case.observations.metrics.boundary.value == "engine"
        assert case.sources["observations.metrics.ttft_ms"].startswith("/metrics vllm:time_to_first_token_seconds")


def test_gauges_read_only_at_the_ends_are_not_figures():
    facts = healthy()
    for path in ("observations.metrics.waiting_requests", "observations.metrics.running_sequences", "observations.memory.kv_cache_usage"):
        assert path not in facts
    assert any("idle" in line and "gauges" in line for line in facts.missing)


# --- zero-count windows ----------------------------------------------------------------------------


def test_a_window_with_nothing_in_it_has_no_figures():
    same = scrape(HEALTHY / "metrics_after.txt")
    facts = from_vllm_window(same, same, duration_s=1.0)
    assert facts.facts == {}
    assert any("no token was generated" in line for line in facts.missing)


def test_no_speculation_figures_without_drafts():
    assert not any(path.startswith("observations.speculation") for path in healthy().facts)


@needs_variants
def test_a_speculating_server_that_drafted_nothing_while_generating_drafted_zero_a_step():
    """No acceptance or tokens per cycle (nothing to divide), but the zero itself is measured: speculation configured
    and inactive, which the canonical facts read as such."""
    facts = from_vllm_window(scrape(VARIANTS / "metrics_before.txt"), scrape(VARIANTS / "metrics_after.txt"))
    assert window_of(VARIANTS, "metrics_before.txt", "metrics_after.txt", "vllm:spec_decode_num_drafts_total") == 0
    assert window_of(VARIANTS, "metrics_before.txt", "metrics_after.txt", "vllm:generation_tokens_total") > 0
    assert sorted(p for p in facts.facts if p.startswith("observations.speculation")) == [
        "observations.speculation.draft_length", "observations.speculation.drafted_per_cycle"]
    assert facts.value("observations.speculation.drafted_per_cycle") == 0
    assert "none over" in facts.facts["observations.speculation.drafted_per_cycle"].source


# --- the variants recording: speculation and queueing ----------------------------------------------


@needs_variants
def test_speculation_figures_from_the_drafting_counters():
    facts = from_vllm_window(scrape(VARIANTS / "metrics_after.txt"), scrape(VARIANTS / "metrics_after_spec.txt"))
    delta = {n: window_of(VARIANTS, "metrics_after.txt", "metrics_after_spec.txt", f"vllm:spec_decode_num_{n}_total")
             for n in ("drafts", "draft_tokens", "accepted_tokens")}
    assert delta == {"drafts": 57, "draft_tokens": 336, "accepted_tokens": 327}
    assert facts.value("observations.speculation.acceptance_rate") == pytest.approx(327 / 336)
    assert facts.value("observations.speculation.drafted_per_cycle") == pytest.approx(336 / 57)  # ngram drafts fewer than 8 when its match is short
    assert facts.value("observations.speculation.mean_accepted_per_cycle") == pytest.approx(1 + 327 / 57)
    assert facts.value("observations.speculation.draft_length") == 8  # --num-speculative-tokens 8


@needs_variants
def test_queue_time_of_requests_that_waited_for_a_slot():
    name = "vllm:request_queue_time_seconds"
    by_hand = window_of(VARIANTS, "metrics_before.txt", "metrics_after.txt", f"{name}_sum") / window_of(
        VARIANTS, "metrics_before.txt", "metrics_after.txt", f"{name}_count"
    )
    facts = from_vllm_window(scrape(VARIANTS / "metrics_before.txt"), scrape(VARIANTS / "metrics_after.txt"))
    queue = facts.value("observations.metrics.queue_ms")
    assert queue["mean"] == pytest.approx(by_hand * 1e3) == pytest.approx(624.16, abs=0.01)
    assert "p50" not in queue  # two of the four never waited: the median sits in the lowest bucket
    assert 1000 < queue["p90"] <= queue["p99"] <= 1500  # the two that waited, in the 1.0-1.5 s bucket


# --- gauges sampled during a load (hand-made: no recording has one) -------------------------------

# A hand-made scrape in vLLM 0.32's format, as if taken while two requests ran and two waited.
IN_LOAD = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="capacity"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="deferred"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.3
"""


def test_gauges_sampled_during_the_load_give_its_peak():
    facts = healthy(gauges=[parse_scrape(IN_LOAD)])
    assert facts.value("observations.metrics.waiting_requests") == 2
    assert facts.value("observations.metrics.running_sequences") == 2
    assert facts.value("observations.memory.kv_cache_usage") == 0.3
    assert facts.facts["observations.memory.kv_cache_usage"].source == "/metrics vllm:kv_cache_usage_perc (largest of 3 scrapes)"
    # 'capacity' is any scheduling limit, not KV space: the queue is not memory's
    assert "observations.memory.waiting_requests" not in facts
    assert any(line.startswith("observations.memory.waiting_requests:") for line in facts.missing)


def test_engines_sum_where_the_server_queues_and_peak_where_one_engine_fills():
    # hand-made: two data-parallel engines of one server
    text = """\
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
vllm:num_requests_waiting{engine="1",model_name="m"} 1
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.9
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.2
"""
    both = parse_scrape(text)
    assert both.total("vllm:num_requests_waiting") == 4
    assert both.largest("vllm:kv_cache_usage_perc") == 0.9
    assert both.total("vllm:kv_cache_usage_perc", engine="1") == 0.2


# --- percentiles by hand ---------------------------------------------------------------------------

# A hand-made histogram: 10 observations up to 0.1 s, 20 more up to 0.2, 60 more up to 0.4, 10 above.
BUCKETS = ((0.1, 10.0), (0.2, 30.0), (0.4, 90.0), (float("inf"), 100.0))


def test_bucket_quantile_interpolates_as_prometheus_does():
    assert bucket_quantile(0.5, BUCKETS) == pytest.approx(0.2 + 0.2 * (50 - 30) / (90 - 30))
    assert bucket_quantile(0.05, BUCKETS) == pytest.approx(0.1 * 5 / 10)  # from 0 in the lowest bucket
    assert bucket_quantile(0.9, BUCKETS) == pytest.approx(0.4)  # exactly at a bound
    assert bucket_quantile(0.99, BUCKETS) == 0.4  # in +Inf: the highest finite bound
    assert bucket_quantile(0.5, ((0.1, 0.0), (float("inf"), 0.0))) is None  # nothing observed
    assert bucket_quantile(0.5, ((0.1, 1.0), (0.2, 2.0))) is None  # no +Inf bucket


def test_histogram_quantile_leaves_out_what_the_buckets_only_bound():
    histogram = Histogram(count=100, sum=25.0, buckets=BUCKETS)
    assert histogram.quantile(0.5) == pytest.approx(0.26667, abs=1e-5)
    assert histogram.quantile(0.9) == pytest.approx(0.4)
    assert histogram.quantile(0.05) is None  # lowest bucket
    assert histogram.quantile(0.99) is None  # above 0.4 s is all the buckets say
    assert histogram.mean == 0.25


def test_percentiles_come_from_windowed_bucket_counts():
    # hand-made: the same histogram before (100 observations) and after 100 more, all between 0.2 and 0.4 s
    def text(counts):
        bounds = ("0.1", "0.2", "0.4", "+Inf")
        lines = [f'x_bucket{{le="{b}"}} {c}' for b, c in zip(bounds, counts)]
        return "# TYPE x histogram\n" + "\n".join(lines) + f"\nx_count {counts[-1]}\nx_sum {counts[-1] * 0.25}\n"

    counted = window(parse_scrape(text((10, 30, 90, 100))), parse_scrape(text((10, 30, 190, 200))))
    histogram = counted.histogram("x")
    assert histogram.count == 100 and histogram.mean == pytest.approx(0.25)
    assert histogram.quantile(0.5) == pytest.approx(0.2 + 0.2 * 50 / 100)  # the lifetime's median would be 0.2 + 0.2 * 70 / 160


# --- refusals --------------------------------------------------------------------------------------


def test_a_counter_that_went_backwards_is_a_restart():
    before = (HEALTHY / "metrics_after.txt").read_text()
    after = (HEALTHY / "metrics_before.txt").read_text()
    with pytest.raises(InputError, match="went from .* the server restarted"):
        window(parse_scrape(before), parse_scrape(after))


def test_a_new_start_time_is_a_restart_even_when_counters_grew():
    before = scrape(HEALTHY / "metrics_before.txt")
    restarted = (HEALTHY / "metrics_after.txt").read_text().replace("process_start_time_seconds 1.", "process_start_time_seconds 2.")
    with pytest.raises(InputError, match="restarted"):
        window(before, parse_scrape(restarted))


def test_oversized_text_is_refused_in_one_line():
    with pytest.raises(InputError, match="MiB") as err:
        parse_scrape("#" * (prometheus.MAX_CHARS + 1))
    assert "\n" not in str(err.value)
    many = "".join(f'x{{i="{i}"}} 1\n' for i in range(prometheus.MAX_SAMPLES + 1))
    with pytest.raises(InputError, match="samples"):
        parse_scrape(many)


@pytest.mark.parametrize("line", ["vllm:x{engine=0} 1", "vllm:x 1 2 3", "vllm:x{a=\"1\" b=\"2\"} 1", "{a=\"1\"} 1", "vllm:x one"])
def test_a_line_that_is_not_exposition_is_named(line):
    with pytest.raises(InputError, match="line 2 is not Prometheus text exposition"):
        parse_scrape("# TYPE vllm:x gauge\n" + line + "\n")


def test_the_parser_reads_escapes_timestamps_and_skips_nan():
    text = 'x{a="q\\"uote",b="back\\\\slash\\n",} 1.5 1700000000000\ny NaN\nz +Inf\n'
    parsed = parse_scrape(text)
    assert parsed.series("x") == [({"a": 'q"uote', "b": "back\\slash\n"}, 1.5)]
    assert parsed.total("y") is None and parsed.total("z") is None


def test_a_sample_twice_is_refused():
    with pytest.raises(InputError, match="appears twice"):
        parse_scrape('x{a="1"} 1\nx{a="1"} 2\n')


def test_a_window_needs_a_positive_duration():
    with pytest.raises(InputError, match="wall time"):
        healthy(duration_s=0)


# --- SGLang and the choice of engine ---------------------------------------------------------------

# Hand-made from SGLang's documentation (docs/references/production_metrics.md) and metric
# definitions (python/sglang/srt/metrics/collector.py); no SGLang server was recorded.
SGLANG = """\
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{model_name="m"}} {prompt}
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{model_name="m"}} {generated}
# TYPE sglang:token_usage gauge
sglang:token_usage{{model_name="m"}} {usage}
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="m"}} {running}
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{model_name="m"}} {queued}
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{{model_name="m"}} {throughput}
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{model_name="m"}} {accept}
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{{le="0.01",model_name="m"}} {itl_low}
sglang:inter_token_latency_seconds_bucket{{le="0.02",model_name="m"}} {generated}
sglang:inter_token_latency_seconds_bucket{{le="+Inf",model_name="m"}} {generated}
sglang:inter_token_latency_seconds_count{{model_name="m"}} {generated}
sglang:inter_token_latency_seconds_sum{{model_name="m"}} {itl_sum}
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{{le="+Inf",model_name="m"}} {requests}
sglang:e2e_request_latency_seconds_count{{model_name="m"}} {requests}
sglang:e2e_request_latency_seconds_sum{{model_name="m"}} {e2e_sum}
"""
SGLANG_BEFORE = dict(prompt=100, generated=1000, usage=0.0, running=0, queued=0, throughput=50.0, accept=2.5,
                     itl_low=0, itl_sum=15.0, requests=10, e2e_sum=20.0)
# 4 requests of 50 prompt and 250 generated tokens, every gap between 10 and 20 ms
SGLANG_AFTER = dict(prompt=300, generated=2000, usage=0.0, running=0, queued=0, throughput=400.0, accept=3.2,
                    itl_low=0, itl_sum=27.0, requests=14, e2e_sum=32.0)
SGLANG_DURING = dict(SGLANG_AFTER, usage=0.45, running=4, queued=3, throughput=420.0, accept=3.0)


def sglang(values: dict) -> prometheus.Scrape:
    return parse_scrape(SGLANG.format(**values))


def test_sglang_window_from_its_documented_metrics():
    facts = from_window(sglang(SGLANG_BEFORE), sglang(SGLANG_AFTER), gauges=[sglang(SGLANG_DURING)])
    assert facts.value("observations.metrics.itl_ms")["mean"] == pytest.approx(12.0)  # 12 s over 1000 gaps
    assert 10 < facts.value("observations.metrics.itl_ms")["p50"] < 20
    assert facts.value("observations.metrics.request_latency_ms") == {"mean": pytest.approx(3000.0)}
    assert facts.value("observations.metrics.output_tokens") == 250
    assert facts.value("observations.metrics.input_tokens") == 50
    assert facts.value("observations.metrics.waiting_requests") == 3
    assert facts.value("observations.metrics.running_sequences") == 4
    assert facts.value("observations.memory.kv_cache_usage") == 0.45
    assert facts.value("observations.metrics.output_tokens_per_s") == pytest.approx(410.0)  # interval averages, no duration given
    assert facts.value("observations.speculation.mean_accepted_per_cycle") == pytest.approx(3.1)  # not the before's 2.5
    assert facts.value("observations.metrics.boundary") == "engine"
    apply_facts(Case(), facts)


def test_sglang_rates_from_counters_when_the_duration_is_known():
    facts = from_sglang_window(sglang(SGLANG_BEFORE), sglang(SGLANG_AFTER), duration_s=4.0)
    assert facts.value("observations.metrics.output_tokens_per_s") == 250.0
    assert facts.value("observations.metrics.requests_per_s") == 1.0


def test_a_scrape_of_no_known_engine_says_so():
    other = parse_scrape("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n")
    facts = from_window(other, other)
    assert facts.facts == {}
    assert facts.missing and "no known serving metrics" in facts.missing[0]
