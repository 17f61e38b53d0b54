"""One home per fact: the canonical step fills each canonical field from its alternatives, never over
what the case states, records where it came from; and every case field has a declared role."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import run_cli

from diagnoser.engine.canonical import EQUIVALENCES, alternative_paths, canonical
from diagnoser.engine.field_roles import INFORMATIONAL, leaf_paths, role, roles
from diagnoser.models.case import Case

REPO = Path(__file__).resolve().parents[1]


def case(**observations) -> Case:
    return Case.model_validate({"observations": observations})


def test_the_largest_capture_from_the_list_or_the_engine_setting():
    from_list = canonical(case(graph={"captured_batch_sizes": [1, 8, 32, 16]}))
    assert from_list.observations.graph.max_captured_batch == 32
    assert from_list.sources["observations.graph.max_captured_batch"].startswith("observations.graph.captured_batch_sizes")
    from_server = canonical(case(server={"cuda_graph_max_batch": 256}))
    assert from_server.observations.graph.max_captured_batch == 256


def test_the_served_weight_format_from_the_pinned_precision_only_when_quantized_and_no_runs_compare():
    def served(precision: str, runs: list | None = None) -> str | None:
        observations = {"server": {"engine": "vllm"}, **({"runs": runs} if runs else {})}
        found = canonical(Case.model_validate({"workload": {"precision": {"weights": precision}}, "observations": observations}))
        return found.observations.server.quantization

    assert served("fp8") == "fp8"
    assert served("bf16") is None  # 16-bit weights are no quantized format
    runs = [{"name": "a", "settings": {"engine_version": "1"}, "figures": {"per_token_ms": 10}},
            {"name": "b", "settings": {"engine_version": "2"}, "figures": {"per_token_ms": 12}}]
    assert served("int4", runs) is None  # the runs measure what changed; the format is alike on both sides
    stated = canonical(Case.model_validate({"workload": {"precision": {"weights": "int4"}},
                                            "observations": {"server": {"quantization": "awq"}}}))
    assert stated.observations.server.quantization == "awq"  # the case's own statement stands


def test_the_pinned_weight_format_from_the_engines_quantization_where_it_names_one():
    def pinned(quantization: str, model: str = "llama-3.1-8b", runs: list | None = None) -> str | None:
        observations = {"server": {"quantization": quantization}, **({"runs": runs} if runs else {})}
        found = canonical(Case.model_validate({"workload": {"model": model}, "observations": observations}))
        weights = found.workload.precision.weights
        return weights.value if "weights" in found.workload.precision.model_fields_set else None

    assert pinned("AWQ") == "int4" and pinned("Q4_K_M") == "int4" and pinned("4-bit (MLX affine)") == "int4"
    assert pinned("Q8_0") == "int8" and pinned("fp8 (w8a8)") == "fp8" and pinned("nvfp4") == "nvfp4"
    assert pinned("Q5_K_M") is None and pinned("IQ3_XXS") is None  # no single format the bound counts
    assert pinned("mxfp4", model="gpt-oss-120b") is None  # its checkpoint's formats, part by part, are the bound's
    runs = [{"name": "a", "settings": {"quantization": "awq"}, "figures": {"per_token_ms": 10}},
            {"name": "b", "settings": {"quantization": "fp8"}, "figures": {"per_token_ms": 12}}]
    assert pinned("awq", runs=runs) is None
    def kv(dtype: str) -> str | None:
        found = canonical(Case.model_validate({"workload": {"model": "llama-3.1-8b"}, "observations": {"server": {"kv_cache_dtype": dtype}}}))
        return found.workload.precision.kv_cache.value if "kv_cache" in found.workload.precision.model_fields_set else None

    assert kv("fp8") == "fp8" and kv("q8_0") == "int8" and kv("q4_0") == "int4" and kv("turbo3") is None
    no_workload = canonical(case(server={"quantization": "awq"}))
    assert no_workload.workload is None  # a format alone pins no workload


def test_the_device_interface_from_the_vendor_of_the_pinned_accelerator():
    def api(hardware: str, **platform) -> str | None:
        observations = {"platform": platform} if platform else {}
        found = canonical(Case.model_validate({"workload": {"hardware": hardware}, "observations": observations}))
        return found.observations.platform.device_api if found.observations.platform else None

    assert api("NVIDIA GeForce RTX 3090") == "cuda" and api("jetson-agx-orin-64gb") == "cuda"
    assert api("mi300x") == "rocm" and api("apple-m2-max") == "metal" and api("tpu-v6e") == "tpu"
    assert api("NVIDIA GeForce RTX 3090 + NVIDIA GeForce RTX 4060") is None  # unlike devices: no one preset
    assert api("Some NPU board") is None
    assert api("rtx-4090", device_api="cpu") == "cpu"  # a build on the host's cores, as the case says


def test_a_logged_piecewise_graph_mode_is_partial_replay():
    line = ("CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend FlashInferBackend; "
            "setting cudagraph_mode=PIECEWISE")
    found = canonical(case(platform={"fallback_logged": line}))
    assert found.observations.graph.status.value == "partial"
    assert found.observations.platform.fallback_read_as == ["observations.graph.status"]
    configured = canonical(case(platform={"fallback_logged": "compilation_config: cudagraph_mode FULL_AND_PIECEWISE"}))
    assert configured.observations.graph is None  # a configured mode that includes full graphs is no fallback


def test_a_logged_recompilation_while_serving_is_no_replay_at_the_live_batch():
    for line in ("torch._dynamo hit config.recompile_limit (8); Recompiling function forward in model.py",
                 "HPU graph recompilation during decode steps; 1,996 distinct decode shapes compiled"):
        found = canonical(case(platform={"fallback_logged": line}))
        assert found.observations.graph.replayed_at_live_batch is False
        assert found.observations.platform.fallback_read_as == ["observations.graph.replayed_at_live_batch"]
    startup = canonical(case(platform={"fallback_logged": "Compiling a graph for dynamic shape takes 21.3 s"}))
    assert startup.observations.graph is None  # compiling once at start-up is no recompilation


def test_the_live_batch_is_per_data_parallel_rank_and_only_beside_graph_facts():
    both = canonical(Case.model_validate({"workload": {"batch": 96, "layout": {"dp": 2}},
                                          "observations": {"server": {"cuda_graph_max_batch": 32}}}))
    assert both.observations.graph.live_batch_size == 48  # 96 sequences over 2 DP ranks
    alone = canonical(Case.model_validate({"workload": {"batch": 96}}))
    assert alone.observations.graph is None  # a batch says nothing about graphs on its own


def test_the_live_batch_from_littles_law_capped_by_the_scheduler():
    # 50 requests/s, each 256 tokens at 5.5 ms plus nothing known of its first token: 50 x 1.408 s = 70 in flight
    served = {"boundary": "client_receipt", "requests_per_s": 50, "output_tokens": 256, "tpot_ms": {"p50": 5.5}}
    found = canonical(case(metrics=served, graph={"max_captured_batch": 48}))
    assert found.observations.graph.live_batch_size == 70
    assert found.sources["observations.graph.live_batch_size"].startswith("observations.metrics.requests_per_s (Little's law")
    latency = canonical(case(metrics={"requests_per_s": 4, "request_latency_ms": {"mean": 3000}}, graph={}))
    assert latency.observations.graph.live_batch_size == 12  # the request's own latency when given
    capped = canonical(case(metrics=served, server={"max_num_seqs": 32}, graph={}))
    assert capped.observations.graph.live_batch_size == 32  # the scheduler runs no more at once
    two_ranks = canonical(Case.model_validate({"workload": {"batch": 64, "layout": {"dp": 2}},
                                               "observations": {"metrics": served, "graph": {}}}))
    assert two_ranks.observations.graph.live_batch_size == 32  # the pinned batch per rank comes first
    stated = canonical(case(metrics={**served, "running_sequences": 20}, graph={}))
    assert stated.observations.graph.live_batch_size == 20  # the engine's own count comes first
    averaged = canonical(case(metrics={"running_sequences": 1.5}, graph={}))
    assert averaged.observations.graph.live_batch_size == 2  # a gauge averaged over a window, as whole sequences
    assert canonical(case(metrics={"running_sequences": 0.4}, graph={})).observations.graph.live_batch_size is None


def test_the_servers_emission_interval_from_its_engine_metrics_behind_a_bursty_stream():
    engine, tail = {"boundary": "engine", "itl_ms": {"mean": 4.8, "p50": 4.5}}, {"client_p99_ms": 87.0}
    bursts = {"bursty": True, "tokens_per_burst": 21.3}  # nginx with gzip on, in front of the real vLLM
    behind = canonical(case(metrics=engine, boundaries=tail, stream=bursts))
    assert behind.observations.boundaries.server_emission_ms == 4.5  # the median, not the mean
    mean_only = canonical(case(metrics={**engine, "itl_ms": {"mean": 4.8}}, boundaries=tail, stream=bursts))
    assert mean_only.observations.boundaries.server_emission_ms == 4.8
    at_client = canonical(case(metrics={**engine, "boundary": "client_receipt"}, boundaries=tail, stream=bursts))
    assert at_client.observations.boundaries.server_emission_ms is None  # a client's ITL is no server's interval
    steady = canonical(case(metrics=engine, boundaries=tail, stream={"bursty": False}))
    assert steady.observations.boundaries.server_emission_ms is None  # its p99 against the median is jitter
    behind_a_little = canonical(case(metrics=engine, boundaries=tail, stream={"bursty": True, "tokens_per_burst": 1.7}))
    assert behind_a_little.observations.boundaries.server_emission_ms is None  # a loaded reader, not a buffer
    big_chunks = canonical(case(metrics=engine, boundaries={**tail, "tokens_per_chunk": 6}, stream={**bursts, "tokens_per_burst": 12}))
    assert big_chunks.observations.boundaries.server_emission_ms is None  # two chunks of six tokens a burst
    no_client = canonical(case(metrics=engine))
    assert no_client.observations.boundaries is None


def test_a_rate_that_is_the_output_over_the_request_latency_includes_prefill():
    # TensorRT-LLM's benchmark line: 190 tokens in a 4,409.8 ms request is 43.09 tokens/s, the rate it printed
    one_stream = {"boundary": "unknown", "output_tokens_per_s": 43.09, "concurrency": 1, "output_tokens": 190,
                  "request_latency_ms": {"mean": 4409.8}}
    found = canonical(case(metrics=one_stream))
    assert found.observations.metrics.rate_includes_prefill is True
    assert "request latency" in found.sources["observations.metrics.rate_includes_prefill"]
    per_user = {k: v for k, v in one_stream.items() if k not in ("output_tokens_per_s", "concurrency")}
    assert canonical(case(metrics={**per_user, "per_user_tokens_per_s": 43.4})).observations.metrics.rate_includes_prefill
    # decode alone: 190 tokens at 50.4 tokens/s took 3.77 s of the 4.41 s request
    decode = canonical(case(metrics={**per_user, "per_user_tokens_per_s": 50.38}))
    assert decode.observations.metrics.rate_includes_prefill is None
    # four streams' aggregate is no single request's rate
    many = canonical(case(metrics={**one_stream, "concurrency": 4}))
    assert many.observations.metrics.rate_includes_prefill is None


def test_one_streams_rate_over_its_whole_run_time_includes_prefill_unless_its_prompt_is_too_short_to_show():
    # a 750-token reply in 133 s read as 5.6 tokens/s: 5.6 x 133 = 744.8 tokens, within 3 % of 750
    reply = {"boundary": "client_receipt", "per_user_tokens_per_s": 5.6, "duration_s": 133, "output_tokens": 750,
             "concurrency": 1}
    found = canonical(case(metrics=reply))
    assert found.observations.metrics.rate_includes_prefill is True
    assert "run time" in found.sources["observations.metrics.rate_includes_prefill"]
    # 1999 tokens after a 2-token context: a prompt under a sixteenth of the output cannot show in the rate
    short = Case.model_validate({"workload": {"batch": 1, "context": 2}, "observations": {"metrics": {
        "boundary": "engine", "per_user_tokens_per_s": 29.99, "duration_s": 66.65, "output_tokens": 1999, "concurrency": 1}}})
    assert canonical(short).observations.metrics.rate_includes_prefill is None
    # the same run time over eight streams is no one request's latency
    assert canonical(case(metrics={**reply, "concurrency": 8})).observations.metrics.rate_includes_prefill is None


def test_acceptance_from_tokens_per_cycle():
    # 2.6 tokens a cycle of 8 drafts: the verify's own token plus 1.6 accepted drafts, 1.6 / 8 = 0.2
    found = canonical(case(speculation={"mean_accepted_per_cycle": 2.6, "draft_length": 8}))
    assert found.observations.speculation.acceptance_rate == pytest.approx(0.2)
    impossible = canonical(case(speculation={"mean_accepted_per_cycle": 12.0, "draft_length": 8}))
    assert impossible.observations.speculation.acceptance_rate is None  # more than k + 1 a cycle is not a count
    # a drafter allowed 8 that drafted 1.0 a cycle: 0.046 of its drafts accepted, not 0.046 / 8
    fewer = canonical(case(speculation={"mean_accepted_per_cycle": 1.046, "draft_length": 8, "drafted_per_cycle": 1.0}))
    assert fewer.observations.speculation.acceptance_rate == pytest.approx(0.046)


def test_speculation_that_drafts_nothing_is_inactive_only_where_it_is_configured():
    counted = canonical(case(server={"speculative": "ngram"}, speculation={"drafted_per_cycle": 0}))
    assert counted.observations.server.speculative_active is False
    assert counted.sources["observations.server.speculative_active"].startswith("observations.speculation.drafted_per_cycle")
    one_query = canonical(case(server={"speculative": "eagle"}, graph={"query_tokens_per_sequence": 1}))
    assert one_query.observations.server.speculative_active is False  # verifying k drafts feeds k + 1 tokens
    drafting = canonical(case(server={"speculative": "ngram"}, speculation={"drafted_per_cycle": 1.5}))
    assert drafting.observations.server.speculative_active is None
    plain = canonical(case(speculation={"drafted_per_cycle": 0}))
    assert plain.observations.server is None  # nothing configured: ordinary decode, no fact about speculation


def test_the_spike_ratio_from_the_engine_percentiles():
    found = canonical(case(metrics={"boundary": "engine", "itl_ms": {"p50": 25, "p99": 400}}))
    assert found.observations.host.itl_spike_ratio == pytest.approx(16.0)


def test_a_stated_canonical_field_is_never_overwritten_and_an_empty_case_is_untouched():
    stated = case(graph={"captured_batch_sizes": [8, 16], "max_captured_batch": 512})
    assert canonical(stated).observations.graph.max_captured_batch == 512
    empty = Case()
    assert canonical(empty) is empty


def test_the_source_of_the_alternative_travels_with_the_canonical_fact():
    stated = Case.model_validate({"observations": {"server": {"cuda_graph_max_batch": 64}},
                                  "sources": {"observations.server.cuda_graph_max_batch": "server.log:40"}})
    assert canonical(stated).sources["observations.graph.max_captured_batch"] == \
        "observations.server.cuda_graph_max_batch, from server.log:40"


def test_every_alternative_and_canonical_field_is_a_case_field():
    fields = set(leaf_paths(Case))
    sections = {p.rsplit(".", 1)[0] for p in fields}
    for eq in EQUIVALENCES:
        # a leaf, or a whole list of entries that an alternative creates when the case has none (kernel_classes)
        assert eq.canonical in fields or eq.canonical in sections, eq.canonical
        for alt in eq.alternatives:
            assert alt.path in fields or alt.path in sections, alt.path


def _rule_and_bound_sources() -> str:
    folders = [REPO / "rules", REPO / "diagnoser" / "engine", REPO / "diagnoser" / "bound"]
    return "\n".join(p.read_text() for folder in folders for p in folder.rglob("*") if p.suffix in (".py", ".yaml"))


def test_every_case_field_is_read_feeds_a_canonical_fact_or_is_declared_informational():
    text = _rule_and_bound_sources().replace(Path(REPO / "diagnoser/engine/field_roles.py").read_text(), "")
    unread = []
    for path, what in roles(Case).items():
        if what.startswith("read by"):
            name = path.rsplit(".", 1)[-1]
            if re.search(rf"\b{name}\b", text) is None:
                unread.append(path)
    assert not unread, f"fields no rule, canonical fact or bound reads and not declared informational: {unread}"
    assert set(INFORMATIONAL) <= set(leaf_paths(Case)), set(INFORMATIONAL) - set(leaf_paths(Case))
    assert alternative_paths() and all(role(p).startswith("feeds") for p in alternative_paths() if p in set(leaf_paths(Case)))


def test_schema_case_says_each_fields_role():
    done = run_cli("schema", "case")
    assert done.returncode == 0
    found = json.loads(done.stdout)["x-field-roles"]
    assert found["observations.server.cuda_graph_max_batch"] == "feeds observations.graph.max_captured_batch"
    assert found["observations.probe.pcie_generation"].startswith("informational: ")
    assert found["observations.probe.temperature_c"] == "read by the rules or the bound"
    assert found["observations.server.max_num_seqs"] == "read by the rules or the bound"
