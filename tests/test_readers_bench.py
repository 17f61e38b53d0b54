"""Benchmark clients' result files, read from real runs against the real vLLM (see each folder's README)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnoser.artifacts.artifact import Artifact
from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.readers import bench_aiperf, bench_guidellm, bench_vllm
from diagnoser.readers.facts import apply_facts

SAMPLES = Path(__file__).parent / "data" / "artifacts"
M = "observations.metrics"
FORMATS = {
    "vllm-bench-serve": bench_vllm.FORMAT,
    "aiperf-json": bench_aiperf.SUMMARY_JSON,
    "aiperf-csv": bench_aiperf.SUMMARY_CSV,
    "aiperf-records": bench_aiperf.RECORDS,
    "aiperf-server-metrics": bench_aiperf.SERVER_METRICS,
    "guidellm": bench_guidellm.FORMAT,
}


def load(folder: str, name: str) -> Artifact:
    return Artifact.load(SAMPLES / folder / name)


def read(folder: str, name: str):
    facts = FORMATS[folder].read(load(folder, name))
    apply_facts(Case(), facts)  # every fact validates into the case
    return facts


def samples():
    return [(d, f.name) for d in FORMATS for f in sorted((SAMPLES / d).iterdir()) if f.name != "README.md"]


@pytest.mark.parametrize("folder,name", samples())
def test_each_sample_is_its_format_only(folder, name):
    artifact = load(folder, name)
    assert [n for n, f in FORMATS.items() if f.recognise(artifact)] == [folder]


def test_vllm_bench_serve_default_percentiles():
    facts = read("vllm-bench-serve", "vllm-bench-serve-chat.json")
    v = facts.value
    assert v(f"{M}.boundary") == "client_receipt"
    # the default --metric-percentiles is 99 alone: mean, median (p50) and p99
    assert v(f"{M}.ttft_ms") == {"mean": 102.89707874994747, "p50": 86.78506000069319, "p99": 171.3824120521167}
    assert v(f"{M}.tpot_ms") == {"mean": 8.404483633065015, "p50": 8.065709790366048, "p99": 12.039481806400985}
    assert v(f"{M}.itl_ms")["p99"] == 89.75372851058637
    assert f"{M}.request_latency_ms" not in facts  # e2el is not in the default --percentile-metrics
    assert v(f"{M}.duration_s") == 1.4960880500002531
    assert v(f"{M}.output_tokens_per_s") == 342.22584693455264
    assert v(f"{M}.requests_per_s") == 10.69455771670477
    assert v(f"{M}.concurrency") == 4
    assert v(f"{M}.input_tokens") == 78  # total_input_tokens 1248 / completed 16 (the chat template's tokens included)
    assert v(f"{M}.output_tokens") == 32  # 512 / 16
    assert "observations.stream.bursty" not in facts  # no --save-detailed, no per-request gaps
    assert facts.facts[f"{M}.input_tokens"].source == "vllm-bench-serve-chat.json total_input_tokens / completed"


def test_vllm_bench_serve_detailed_has_p90_e2el_and_the_stream():
    facts = read("vllm-bench-serve", "vllm-bench-serve-detailed.json")
    v = facts.value
    assert v(f"{M}.request_latency_ms") == {
        "mean": 237.6538439380056, "p50": 234.8811680003564, "p90": 249.5180670011905, "p99": 275.37535420069617,
    }
    assert v(f"{M}.ttft_ms")["p90"] == 55.46877349843271
    assert v(f"{M}.input_tokens") == 64  # 1024 / 16 (completions: no chat template)
    doc = json.loads((SAMPLES / "vllm-bench-serve" / "vllm-bench-serve-detailed.json").read_text())
    gaps = sum(len(r) for r in doc["itls"])
    assert gaps == 16 * 31  # 32 tokens a request, one chunk each: 31 gaps
    # 97 of the 496 gaps fell under a quarter of their request's mean gap (burst_sizes), 0.196 < BURSTY_FRACTION 0.2
    assert v("observations.stream.near_zero_gap_fraction") == pytest.approx(97 / 496)
    assert v("observations.stream.bursty") is False


def test_aiperf_summary_json():
    facts = read("aiperf-json", "profile_export_aiperf.json")
    v = facts.value
    assert v(f"{M}.ttft_ms") == {"mean": 213.661536625, "p50": 202.173438, "p90": 327.6428115, "p99": 427.340091}
    # AIPerf's inter_token_latency is vLLM's TPOT; its p50 is 0 (whole streams read at once on this host) and is left out
    assert v(f"{M}.tpot_ms") == {"mean": 0.6560238484848485, "p90": 2.3920493484848486, "p99": 5.573055251515151}
    assert v(f"{M}.itl_ms") == {"mean": 0.7054594541751527}  # inter_chunk_latency: every percentile 0
    assert v(f"{M}.request_latency_ms")["p50"] == 213.7030855
    assert v(f"{M}.output_tokens_per_s") == 480.22063278214915
    assert v(f"{M}.per_user_tokens_per_s") == 192.04357317109015
    assert v(f"{M}.requests_per_s") == 14.308249766321017
    assert v(f"{M}.duration_s") == 1.113123072
    assert v(f"{M}.concurrency") == 4  # input_config.phases[0] (profiling).concurrency
    assert v(f"{M}.input_tokens") == 78  # usage_prompt_tokens (the server's count), not input_sequence_length 64
    assert v(f"{M}.output_tokens") == 32  # usage_completion_tokens, not AIPerf's re-tokenised 33.56


def test_aiperf_csv_is_the_json_rounded():
    facts = read("aiperf-csv", "profile_export_aiperf.csv")
    v = facts.value
    assert v(f"{M}.ttft_ms") == {"mean": 213.66, "p50": 202.17, "p90": 327.64, "p99": 427.34}
    assert v(f"{M}.tpot_ms") == {"mean": 0.66, "p90": 2.39, "p99": 5.57}
    assert v(f"{M}.duration_s") == 1.11  # the "Metric,Value" table
    assert v(f"{M}.output_tokens_per_s") == 480.22
    assert v(f"{M}.input_tokens") == 78
    assert f"{M}.concurrency" not in facts  # the CSV does not carry the load settings
    assert facts.facts[f"{M}.ttft_ms"].source == "profile_export_aiperf.csv:43"


def test_aiperf_records_agree_with_the_summary():
    facts = read("aiperf-records", "profile_export.jsonl")
    v = facts.value
    summary = read("aiperf-json", "profile_export_aiperf.json").value
    for figure in ("ttft_ms", "tpot_ms", "itl_ms", "request_latency_ms"):
        assert v(f"{M}.{figure}") == pytest.approx(summary(f"{M}.{figure}"))
    assert v(f"{M}.input_tokens") == 78 and v(f"{M}.output_tokens") == 32
    assert f"{M}.output_tokens_per_s" not in facts  # rates need the benchmark window, which records lack
    # 491 chunk gaps over 16 requests; all but 2 are 0 ms (whole streams read in one go): 489 / 491 bunched
    assert v("observations.stream.near_zero_gap_fraction") == pytest.approx(489 / 491)
    assert v("observations.stream.bursty") is True


def test_aiperf_server_metrics_are_the_engines_window():
    facts = read("aiperf-server-metrics", "server_metrics_export.json")
    v = facts.value
    assert v(f"{M}.boundary") == "engine"
    # vllm:time_to_first_token_seconds over the phase: sum 0.36282920837402344 s / count 16
    assert v(f"{M}.ttft_ms")["mean"] == pytest.approx(362.82920837402344 / 16)
    # 16 observations; p50 at rank 8: bucket (0.02, 0.04] holds counts 5..16, so 0.02 + 0.02 * (8 - 5) / 11 s
    assert v(f"{M}.ttft_ms")["p50"] == pytest.approx((0.02 + 0.02 * 3 / 11) * 1e3)
    assert v(f"{M}.input_tokens") == 78  # vllm:request_prompt_tokens sum 1248 / count 16
    assert v(f"{M}.output_tokens") == 32
    # phase 1796264249853860771 -> 1796264250972096772 ns = 1.118236001 s; 512 generation tokens, 16 requests
    assert v(f"{M}.output_tokens_per_s") == pytest.approx(512 / 1.118236001)
    assert v(f"{M}.requests_per_s") == pytest.approx(16 / 1.118236001)
    assert v("observations.memory.preemptions") == 0
    assert v("observations.server.kv_cache_tokens") == 524288  # vllm:cache_config_info labels
    assert "server_metrics_export.json vllm:time_to_first_token_seconds" in facts.facts[f"{M}.ttft_ms"].source


def test_guidellm_one_benchmark_json_and_yaml_agree():
    facts = read("guidellm", "guidellm-concurrent.json")
    v = facts.value
    assert v(f"{M}.ttft_ms") == {"mean": 172.91356722513837, "p50": 108.87646675109863, "p90": 316.32161140441895, "p99": 325.8059024810791}
    assert v(f"{M}.tpot_ms")["p50"] == 6.118389867967175  # GuideLLM's inter_token_latency_ms: vLLM's TPOT
    assert v(f"{M}.request_latency_ms")["p50"] == pytest.approx(302.2427558898926)  # 0.3022... s
    assert f"{M}.itl_ms" not in facts  # GuideLLM reports no chunk gaps
    assert v(f"{M}.output_tokens_per_s") == pytest.approx(15 * 32 / 1.5441420078277588)  # 15 completed x 32 tokens / duration
    assert v(f"{M}.requests_per_s") == pytest.approx(15 / 1.5441420078277588)
    assert v(f"{M}.duration_s") == 1.5441420078277588
    assert v(f"{M}.concurrency") == 4  # config.strategy.streams
    assert v(f"{M}.input_tokens") == 78 and v(f"{M}.output_tokens") == 32
    yaml_facts = read("guidellm", "guidellm-concurrent.yaml")
    assert {p: s.value for p, s in yaml_facts.facts.items()} == {p: s.value for p, s in facts.facts.items()}


def test_guidellm_sweep_is_one_run_per_benchmark():
    runs = read("guidellm", "guidellm-streams-1-4.json").value("observations.runs")
    assert [r["name"] for r in runs] == ["concurrent 1", "concurrent 4"]
    assert [r["settings"] for r in runs] == [{"concurrency": 1}, {"concurrency": 4}]
    assert runs[0]["figures"]["duration_s"] == 2.2080795764923096
    assert runs[1]["figures"]["duration_s"] == 1.0643165111541748
    assert all(r["boundary"] == "client_receipt" and r["figures"]["per_token_ms"] > 0 for r in runs)


def damaged_copies():
    """(folder, sample, how to damage its text)."""
    def set_json(key, value):
        return lambda text: json.dumps({**json.loads(text), key: value})

    def drop_json(key):
        return lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != key})

    def cut(text):
        return text[: len(text) // 2]

    return [
        ("vllm-bench-serve", "vllm-bench-serve-chat.json", set_json("mean_tpot_ms", "abc"), 'mean_tpot_ms is "abc", not a number'),
        ("vllm-bench-serve", "vllm-bench-serve-chat.json", drop_json("completed"), "it has no completed"),
        ("vllm-bench-serve", "vllm-bench-serve-detailed.json", set_json("itls", "none"), "itls is"),
        ("vllm-bench-serve", "vllm-bench-serve-chat.json", cut, "cut short"),
        ("aiperf-json", "profile_export_aiperf.json", drop_json("request_latency"), "cut short"),
        ("aiperf-json", "profile_export_aiperf.json", set_json("time_to_first_token", {"unit": "ms", "avg": "fast"}),
         'time_to_first_token mean is "fast", not a number'),
        ("aiperf-json", "profile_export_aiperf.json", cut, "cut short"),
        ("aiperf-csv", "profile_export_aiperf.csv", lambda t: t.replace("Request Latency (ms),235.31", "Request Latency (ms),slow"),
         'request_latency mean is "slow", not a number'),
        ("aiperf-csv", "profile_export_aiperf.csv", lambda t: "\n".join(t.splitlines()[:41]) + "\nRequest Latency (ms),235.31", "fields under a header"),
        ("aiperf-records", "profile_export.jsonl", lambda t: t.replace('"value":194.547562', '"value":"x"', 1), "not a number"),
        ("aiperf-records", "profile_export.jsonl", lambda t: t[: len(t) // 2], "cut short"),
        ("aiperf-server-metrics", "server_metrics_export.json", lambda t: t.replace('"total": 512.0', '"total": "many"'), "not a number"),
        ("aiperf-server-metrics", "server_metrics_export.json", drop_json("metrics"), "cut short"),
        ("guidellm", "guidellm-concurrent.json", lambda t: t.replace('"duration": 1.5441420078277588', '"duration": "long"'),
         'benchmarks.0.duration is "long", not a number'),
        ("guidellm", "guidellm-concurrent.json", cut, "cut short"),
        ("guidellm", "guidellm-concurrent.yaml", lambda t: t.replace("  metrics:\n", "  metricz:\n", 1), "benchmarks.0.metrics is null"),
    ]


@pytest.mark.parametrize("folder,name,damage,said", damaged_copies())
def test_a_damaged_copy_is_one_line(tmp_path, folder, name, damage, said):
    original = (SAMPLES / folder / name).read_text()
    broken = damage(original)
    assert broken != original
    path = tmp_path / name
    path.write_text(broken)
    with pytest.raises(InputError) as err:
        FORMATS[folder].read(Artifact.load(path))
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{name}: ") and said in message
