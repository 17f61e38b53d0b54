"""Faults a live diagnosis of a real vLLM server finds, built as a live reading would build them.

The figures are those the real server showed on a 2-core CPU machine with a tiny model (healthy decode
step 2.35 ms): each case is the healthy live reading (server config, a /metrics window, a decode-only
trace budget and its step mix, a client stream) with the one fault's facts in it, and the true cause
must rank first among the causes. The healthy reading itself must name none of them.
"""

from __future__ import annotations

import copy

import pytest

from diagnoser.engine import diagnose, load_rulebook
from diagnoser.models.case import Case
from diagnoser.models.hypothesis import Grade, Kind

NEW_RULES = {"admission-queueing", "speculation-low-acceptance", "default-penalties", "compile-off", "client-timing-bursty"}
EXTENDED = {"prefill-stalls", "graphs-off"}

# What a live reading of the healthy CPU server holds.
HEALTHY = {
    "title": "live vLLM, CPU, healthy",
    "observations": {
        "server": {
            "engine": "vllm",
            "cuda_graphs": False,  # a CPU build has no CUDA graphs: no fault
            "torch_compile": True,
            "max_num_seqs": 4,
            "max_num_batched_tokens": 2048,
            "long_prefill_token_threshold": 0,
            "kv_cache_tokens": 32768,
            "kv_cache_dtype": "auto",
            "prefix_caching": True,
            "chunked_prefill": True,
            "penalties": False,
            "repetition_penalty": False,
        },
        "platform": {"device_api": "cpu", "cpu_threads": 2, "cpu_cores_available": 2},
        "metrics": {
            "boundary": "engine",
            "queue_ms": {"mean": 0.5, "p50": 0.4},
            "ttft_ms": {"mean": 45, "p50": 44},
            "prefill_ms": {"mean": 42, "p50": 41},
            "itl_ms": {"p50": 2.4, "p99": 3.1},
            "tpot_ms": {"mean": 2.45, "p50": 2.4},
            "waiting_requests": 0,
            "concurrency": 4,
            "running_sequences": 4,
        },
        "budget": {"step_ms": 2.35, "device_ms": 2.2, "host_ms": 0.15, "source": "torch profiler, decode-only steps"},
        "step_mix": {"decode_steps": 400, "decode_step_ms": 2.35},
        "stream": {"bursty": False, "near_zero_gap_fraction": 0.02, "worst_stall_ms": 6},
        "boundaries": {"device_step_ms": 2.35, "client_receipt_ms": 2.45},
    },
}


def live(**sections) -> Case:
    """The healthy live reading with some sections' fields replaced (None drops a field or section)."""
    data = copy.deepcopy(HEALTHY)
    obs = data["observations"]
    for name, fields in sections.items():
        if fields is None:
            obs.pop(name, None)
        elif isinstance(fields, dict) and isinstance(obs.get(name), dict):
            obs[name].update(fields)
            obs[name] = {k: v for k, v in obs[name].items() if v is not None}
        else:
            obs[name] = fields
    return Case.model_validate(data)


@pytest.fixture(scope="module")
def book():
    return load_rulebook()


def causes(case: Case, book) -> list:
    return diagnose(case, book).of_kind(Kind.cause)


def first_cause(case: Case, book):
    found = causes(case, book)
    assert found, "no cause named"
    return found[0]


def test_the_healthy_live_reading_names_none_of_the_live_causes(book):
    d = diagnose(live(), book)
    fired = {h.rule for h in d.hypotheses}
    assert fired & (NEW_RULES | EXTENDED) == set()
    assert d.of_kind(Kind.cause) == []


# --- admission-queueing ------------------------------------------------------------------------------

def test_max_num_seqs_1_with_4_streams_queues_the_first_token(book):
    """Client first-token p50 1,689 ms against 51 ms healthy: the server's queue held all but ~51 ms."""
    case = live(
        server={"max_num_seqs": 1},
        metrics={"queue_ms": {"p50": 1638}, "ttft_ms": {"p50": 1689}, "prefill_ms": {"p50": 45},
                 "waiting_requests": 3, "running_sequences": 1},
    )
    top = first_cause(case, book)
    assert top.rule == "admission-queueing" and top.grade is Grade.measured
    assert top.gain.removable_ms == pytest.approx(1638) and top.gain.step_ms == pytest.approx(1689)


def test_max_num_seqs_4_at_concurrency_8_queues_the_first_token(book):
    """Mean TTFT 317 ms at concurrency 8 against 32 ms at 4; the per-token time is about the same."""
    case = live(metrics={"queue_ms": {"mean": 285}, "ttft_ms": {"mean": 317}, "concurrency": 8, "waiting_requests": 4})
    top = first_cause(case, book)
    assert top.rule == "admission-queueing" and top.grade is Grade.measured
    assert top.gain.speedup == pytest.approx(317 / 32)


def test_more_streams_than_admitted_without_a_queue_time_is_indicated(book):
    case = live(metrics={"queue_ms": None, "ttft_ms": {"mean": 317}, "concurrency": 8})
    top = first_cause(case, book)
    assert top.rule == "admission-queueing" and top.grade is Grade.indicated and top.gain is None
    assert "metrics.queue_ms" in top.bounded_by


# --- speculation-low-acceptance ----------------------------------------------------------------------

SPECULATING = {"server": {"speculative": "ngram"}, "stream": {"bursty": True, "near_zero_gap_fraction": 0.1},
               "budget": {"step_ms": 3.97, "device_ms": 3.75, "host_ms": 0.22},
               "step_mix": {"decode_steps": 400, "decode_step_ms": 3.97},
               "boundaries": {"device_step_ms": 3.97, "client_receipt_ms": 4.0}}


def test_ngram_speculation_at_20_percent_of_8_drafts_ranks_first_against_the_ordinary_step(book):
    case = live(
        **SPECULATING,
        speculation={"acceptance_rate": 0.2, "draft_length": 8, "ordinary_step_ms": 2.35},
        metrics={"tpot_ms": {"p50": 3.99, "mean": 3.99}, "itl_ms": {"p50": 3.99}},
    )
    top = first_cause(case, book)
    assert top.rule == "speculation-low-acceptance" and top.grade is Grade.measured
    assert top.gain.removable_ms == pytest.approx(3.99 - 2.35)
    evidence = {e.name: e.value for e in top.evidence}
    assert evidence["emitted_tokens_per_cycle"] == pytest.approx(2.6) and evidence["verified_tokens_per_cycle"] == 9


def test_ngram_speculation_with_a_run_without_it_ranks_first(book):
    case = live(
        **SPECULATING,
        speculation={"acceptance_rate": 0.2, "draft_length": 8},
        metrics={"tpot_ms": {"p50": 3.99, "mean": 3.99}},
        runs=[
            {"name": "ngram k=8", "settings": {"speculative": True}, "figures": {"per_token_ms": 3.99}},
            {"name": "plain", "baseline": True, "settings": {"speculative": False}, "figures": {"per_token_ms": 2.35}},
        ],
    )
    ranked = [h.rule for h in causes(case, book)]
    assert ranked[0] == "speculation-low-acceptance"
    assert ranked.index("speculation-low-acceptance") < ranked.index("speculation-slowdown")


def test_speculation_counters_alone_name_low_acceptance_first(book):
    case = live(**SPECULATING, speculation={"acceptance_rate": 0.2, "draft_length": 8}, metrics={"tpot_ms": {"p50": 3.99}})
    top = first_cause(case, book)
    assert top.rule == "speculation-low-acceptance" and top.grade is Grade.indicated


def test_a_drafter_that_drafts_fewer_than_it_may_is_judged_on_what_it_drafted(book):
    """The real vLLM's n-gram drafter, allowed 8, drafted 1.0 token a cycle and 4.6 % of them were accepted: the
    cycle verifies 2 tokens (not 9) and emits 1.05, half of them; named by the acceptance rate, not the kept share."""
    case = live(**SPECULATING, speculation={"acceptance_rate": 0.046, "draft_length": 8, "drafted_per_cycle": 1.0,
                                            "mean_accepted_per_cycle": 1.046})
    top = first_cause(case, book)
    assert top.rule == "speculation-low-acceptance" and top.grade is Grade.indicated
    evidence = {e.name: e.value for e in top.evidence}
    assert evidence["verified_tokens_per_cycle"] == 2 and evidence["emitted_tokens_per_cycle"] == pytest.approx(1.046)
    assert evidence["speculation.draft_length"] == 8 and evidence["speculation.drafted_per_cycle"] == 1.0
    assert "1 drafted (of 8 allowed)" in top.explanation and "(52%)" in top.explanation


def test_one_draft_a_cycle_accepted_often_is_not_low_acceptance(book):
    """One drafted token a cycle at 40 % acceptance emits 1.4 tokens: not most drafts rejected."""
    case = live(**SPECULATING, speculation={"acceptance_rate": 0.4, "draft_length": 8, "drafted_per_cycle": 1.0})
    assert "speculation-low-acceptance" not in [h.rule for h in causes(case, book)]


# --- default-penalties -------------------------------------------------------------------------------

def test_penalties_on_in_the_default_generation_config_rank_first(book):
    """Repetition 1.2, frequency/presence 0.5 by default: 4.06 ms a step; the same request with the
    penalties overridden to neutral runs at the healthy 2.35 ms."""
    case = live(
        server={"penalties": True, "repetition_penalty": True},
        budget={"step_ms": 4.06, "device_ms": 3.8, "host_ms": 0.26},
        step_mix={"decode_steps": 400, "decode_step_ms": 4.06},
        metrics={"tpot_ms": {"p50": 4.1, "mean": 4.1}, "itl_ms": {"p50": 4.1}},
        boundaries={"device_step_ms": 4.06, "client_receipt_ms": 4.15},
        runs=[  # as the live ablation writes them: the server as it serves is the baseline
            {"name": "server default (penalties on)", "baseline": True, "settings": {"penalties": True}, "figures": {"per_token_ms": 4.06}},
            {"name": "penalties neutral in the request", "settings": {"penalties": False}, "figures": {"per_token_ms": 2.35}},
        ],
    )
    top = first_cause(case, book)
    assert top.rule == "default-penalties" and top.grade is Grade.measured
    assert top.gain.removable_ms == pytest.approx(4.06 - 2.35)
    assert "penalty-over-history" not in {h.rule for h in causes(case, book) if h.grade is Grade.measured}


# --- prefill-stalls from the step mix ----------------------------------------------------------------

def test_long_prompts_interleaved_into_decode_rank_prefill_stalls_first(book):
    """2000-token prompts arriving during decode: 30-190 ms prefills inside mixed steps."""
    case = live(
        step_mix={"decode_steps": 400, "prefill_steps": 2, "mixed_steps": 12, "decode_step_ms": 2.35,
                  "mixed_step_ms": 95, "prefill_tokens_per_mixed_step": 2000},
        metrics={"itl_ms": {"p50": 2.4, "p99": 150}},
        stream={"worst_stall_ms": 190},
    )
    top = first_cause(case, book)
    assert top.rule == "prefill-stalls" and top.grade is Grade.measured
    # each mixed step stalls the streams 92.65 ms; spread over the 412 steps they decode through, 2.7 ms a step
    assert top.gain.removable_ms == pytest.approx((95 - 2.35) * 12 / 412)
    assert top.gain.step_ms == pytest.approx(2.35 + (95 - 2.35) * 12 / 412)


# --- compile-off, and no graphs-off on a CPU ---------------------------------------------------------

def test_enforce_eager_on_a_cpu_is_compile_off_and_never_graphs_off(book):
    case = live(
        server={"torch_compile": False},
        budget={"step_ms": 3.93, "device_ms": 3.7, "host_ms": 0.23},
        step_mix={"decode_steps": 400, "decode_step_ms": 3.93},
        metrics={"tpot_ms": {"p50": 3.95, "mean": 3.95}, "itl_ms": {"p50": 3.95}},
        boundaries={"device_step_ms": 3.93, "client_receipt_ms": 4.0},
        runs=[
            {"name": "enforce-eager", "settings": {"enforce_eager": True}, "figures": {"per_token_ms": 3.93}},
            {"name": "default", "baseline": True, "settings": {"enforce_eager": False}, "figures": {"per_token_ms": 2.35}},
        ],
    )
    found = causes(case, book)
    assert found[0].rule == "compile-off" and found[0].grade is Grade.measured
    assert found[0].gain.removable_ms == pytest.approx(3.93 - 2.35)
    assert not {"graphs-off", "launch-gaps", "regression-located"} & {h.rule for h in found}


def test_compile_off_locates_the_host_time_of_a_real_cpu_budget(book):
    """A real CPU trace puts about half the step between ops, on the host (3.43 of 6.56 ms in the recording of
    the healthy server): uncompiled, that is where the op-by-op dispatch goes, so the measured eager delta leads."""
    case = live(
        server={"torch_compile": False},
        budget={"step_ms": 3.93, "device_ms": 2.0, "host_ms": 1.93},
        step_mix={"decode_steps": 400, "decode_step_ms": 3.93},
        boundaries={"device_step_ms": 3.93, "client_receipt_ms": 4.0},
        runs=[
            {"name": "enforce-eager", "settings": {"enforce_eager": True}, "figures": {"per_token_ms": 3.93}},
            {"name": "default", "baseline": True, "settings": {"enforce_eager": False}, "figures": {"per_token_ms": 2.35}},
        ],
    )
    ranked = [h.rule for h in causes(case, book)]
    assert ranked[:2] == ["compile-off", "host-overhead"]


def test_compile_off_from_the_config_alone_is_indicated_first(book):
    case = live(server={"torch_compile": False}, budget={"step_ms": 3.93, "device_ms": 3.7, "host_ms": 0.23})
    top = first_cause(case, book)
    assert top.rule == "compile-off" and top.grade is Grade.indicated


def test_graphs_off_still_fires_on_a_gpu(book):
    """The same configuration on a GPU, no trace yet: graphs off is named (indicated, the launch part unknown)."""
    case = live(platform={"device_api": "cuda", "cpu_threads": None, "cpu_cores_available": None}, budget=None, step_mix=None)
    assert "graphs-off" in {h.rule for h in causes(case, book)}
    assert "graphs-off" not in {h.rule for h in causes(live(budget=None, step_mix=None), book)}


# --- client-timing-bursty ----------------------------------------------------------------------------

def test_a_bursty_client_stream_is_not_read_as_token_times(book):
    case = live(stream={"bursty": True, "near_zero_gap_fraction": 0.45}, boundaries={"client_receipt_ms": 0.9})
    d = diagnose(case, book)
    guard = next(h for h in d.hypotheses if h.rule == "client-timing-bursty")
    assert guard.kind is Kind.guard and guard.leads
    assert d.hypotheses[0].rule == "client-timing-bursty"
