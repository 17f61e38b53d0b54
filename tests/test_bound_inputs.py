"""The bound's inputs: a missing context, rules that cannot apply, expected figures left uncompared, the fit."""

import json

import pytest

from conftest import run_cli
from diagnoser.bound import compute_bound
from diagnoser.bound.capacity import GIB, does_not_fit, residency
from diagnoser.engine import diagnose, load_rulebook
from diagnoser.engine.expectation import uncompared_expected
from diagnoser.models.case import Case
from diagnoser.models.hardware import hardware_preset
from diagnoser.models.model_spec import resolve_model
from diagnoser.models.workload import Workload
from diagnoser.report.diagnosis import render_markdown, render_text

EXPERT_RULES = {
    "ep-imbalance", "small-expert-kernels", "expert-kernel-below-reference", "expert-shape-limited",
    "moe-untuned-config", "expert-tile-padding",
}


@pytest.fixture(scope="module")
def rulebook():
    return load_rulebook()


def _case(workload: dict, **observations) -> Case:
    metrics = {"boundary": "client_receipt", "tpot_ms": {"p50": 30}}
    return Case.model_validate({"title": "t", "workload": workload, "observations": {"metrics": metrics, **observations}})


# --- 1. a missing context is a note and a question, never a silent zero

def test_a_pin_without_context_says_the_floor_counts_no_kv_read():
    bf16 = {"weights": "bf16", "kv_cache": "bf16"}
    stated = compute_bound(Workload(model="llama-3.1-8b", hardware="h100-sxm", batch=8, context=0, precision=bf16))
    unstated = compute_bound(Workload(model="llama-3.1-8b", hardware="h100-sxm", batch=8, precision=bf16))
    assert stated.lacks == [] and not any("context" in n for n in stated.notes)  # an explicit 0 is a figure
    assert unstated.lacks == ["workload.context"]
    assert any(n.startswith("no context given: the floor counts no KV-cache read") for n in unstated.notes)


def test_a_pin_without_precision_says_the_floor_assumed_bf16():
    # llama-3.1-8b: the default precision is the one a bf16 deployment states, so the floors agree; only the note differs
    assumed = compute_bound(Workload(model="llama-3.1-8b", hardware="h100-sxm", batch=8, context=2048))
    stated = compute_bound(Workload(model="llama-3.1-8b", hardware="h100-sxm", batch=8, context=2048,
                                    precision={"weights": "bf16", "kv_cache": "bf16"}))
    assert assumed.lacks == ["workload.precision"] and stated.lacks == []
    assert assumed.floor_ms == stated.floor_ms
    assert any(n.startswith("no precision given: the floor assumes bf16") for n in assumed.notes)


def test_a_pin_that_names_only_its_kv_format_still_lacks_the_weights_format():
    kv_only = compute_bound(Workload(model="llama-3.1-8b", hardware="h100-sxm", batch=8, context=2048, precision={"kv_cache": "fp8"}))
    assert kv_only.lacks == ["workload.precision"]
    assert any(n.startswith("no weight format given: the floor assumes bf16 weights") for n in kv_only.notes)
    assert not any(n.startswith("no precision given") for n in kv_only.notes)  # the KV cache's format was given


def test_diagnose_asks_for_the_context_first_and_says_why(rulebook):
    d = diagnose(_case({"model": "llama-3.1-8b", "hardware": "h100-sxm", "batch": 8}), rulebook)
    assert d.bound.lacks == ["workload.context", "workload.precision"]
    first = d.questions[0]
    assert first.input == "workload.context" and first.label == "context length"
    # the gap it states is read from a floor without KV: the answer re-bounds it
    assert "unexplained-gap" in first.would_bound and "faster-than-floor" in first.would_evaluate
    text = render_text(d)
    assert "Bound note: no context given" in text and "1. context length: give workload.context" in text
    assert "- Bound note: no context given" in render_markdown(d)
    with_context = diagnose(_case({"model": "llama-3.1-8b", "hardware": "h100-sxm", "batch": 8, "context": 2048}), rulebook)
    assert with_context.bound.lacks == ["workload.precision"] and all(q.input != "workload.context" for q in with_context.questions)


def test_bound_and_diagnose_on_the_command_line_both_say_it(tmp_path):
    case = tmp_path / "case.yaml"
    case.write_text("workload: {model: llama-3.1-8b, hardware: h100-sxm, batch: 8}\n"
                    "observations: {metrics: {boundary: client_receipt, tpot_ms: {p50: 30}}}\n")
    bound = run_cli("bound", str(case))
    assert bound.returncode == 0 and "note: no context given: the floor counts no KV-cache read" in " ".join(bound.stdout.split())
    assert json.loads(run_cli("bound", str(case), "--json").stdout)["lacks"] == ["workload.context", "workload.precision"]
    assert "note: no precision given: the floor assumes bf16" in " ".join(bound.stdout.split())
    assert "Bound note: no context given" in run_cli("diagnose", str(case)).stdout


# --- 2. questions only name rules that can apply to the pinned model

def _named_rules(d) -> set[str]:
    return {r for q in d.questions for r in (*q.would_evaluate, *q.would_bound)}


def test_a_dense_model_is_not_asked_about_experts(rulebook):
    dense = diagnose(_case({"model": "llama-3.1-8b", "hardware": "h100-sxm", "batch": 8, "context": 2048}), rulebook)
    assert not _named_rules(dense) & EXPERT_RULES
    assert {"routing", "gemm_sweep"}.isdisjoint(q.input for q in dense.questions)  # asked only for expert rules
    moe = diagnose(_case({"model": "qwen3-30b-a3b", "hardware": "h100-sxm", "batch": 8, "context": 2048}), rulebook)
    assert EXPERT_RULES - {"expert-tile-padding"} <= _named_rules(moe)  # that one requires no input of its own
    unpinned = diagnose(_case({"batch": 8}), rulebook)  # no model: nothing rules a rule out
    assert "small-expert-kernels" in _named_rules(unpinned)


def test_every_expert_rule_declares_that_it_applies_to_moe_only(rulebook):
    assert {s.id for s in rulebook.specs.values() if s.applies == "moe"} >= EXPERT_RULES


# --- 3. every expected figure is compared, or the report says why not

@pytest.mark.parametrize("expected, metrics, needle", [
    ({"kind": "older_version", "duration_s": 60, "boundary": "client_receipt"}, {"boundary": "client_receipt", "tpot_ms": {"p50": 30}},
     "expected.duration_s = 60 is compared with nothing: the case holds no wall time of the same job"),
    ({"kind": "vendor_claim", "per_user_tokens_per_s": 50}, {"boundary": "engine", "output_tokens_per_s": 900},
     "expected.per_user_tokens_per_s = 50 is compared with nothing: the case holds no per-token time or per-stream rate"),
    ({"kind": "other_config", "per_token_ms": 12, "boundary": "device_step"}, {"boundary": "client_receipt", "tpot_ms": {"p50": 30}},
     "it was read at device_step, the case's per-token time or per-stream rate (TPOT, ITL, a step time) only at client_receipt"),
])
def test_an_expected_figure_with_nothing_of_its_kind_is_named(rulebook, expected, metrics, needle):
    case = Case.model_validate({"observations": {"expected": expected, "metrics": metrics}})
    d = diagnose(case, rulebook)
    assert len(d.notes) == 1 and needle in d.notes[0]
    assert f"Note: {d.notes[0]}" in render_text(d) and f"- Note: {d.notes[0]}" in render_markdown(d)
    assert json.loads(d.model_dump_json())["notes"] == d.notes


def test_an_expected_figure_with_an_observation_of_its_kind_needs_no_note():
    case = Case.model_validate({"observations": {
        "expected": {"kind": "older_version", "per_user_tokens_per_s": 100, "output_tokens_per_s": 3000, "boundary": "client_receipt"},
        "metrics": {"boundary": "client_receipt", "tpot_ms": {"p50": 14}},
        "runs": [{"name": "a", "figures": {"output_tokens_per_s": 2000}}, {"name": "b", "figures": {"output_tokens_per_s": 3000}}],
    }})
    assert uncompared_expected(case) == []


def test_one_stream_s_aggregate_rate_is_its_own_rate_to_the_note_as_to_the_rules(rulebook):
    # With one request in flight the aggregate rate is the stream's: the canonical per-stream rate, read before the
    # note looks for a figure of the expected kind, so a benchmark's aggregate figure at concurrency 1 is compared.
    case = Case.model_validate({"observations": {
        "expected": {"kind": "vendor_claim", "per_user_tokens_per_s": 50.4},
        "metrics": {"boundary": "engine", "output_tokens_per_s": 43.1, "concurrency": 1},
    }})
    d = diagnose(case, rulebook)
    assert d.notes == [] and d.reference_step_ms == pytest.approx(1e3 / 43.1)
    two = case.model_copy(update={"observations": case.observations.model_copy(update={
        "metrics": case.observations.metrics.model_copy(update={"concurrency": 2})})})
    assert any("compared with nothing" in n for n in diagnose(two, rulebook).notes)


# --- 4. resident weights and KV at the batch and context fit the device, or it is said

def test_residency_per_rank_after_tp_by_hand():
    # llama-3.1-70b, bf16, TP=2 (d=8192, 80 layers, 64 heads and 8 KV heads of 128, MLP 28672, vocab 128256):
    #   attention per layer per rank: q,o 8192*32*128*2 + k,v 2*8192*4*128     =  75,497,472 elements
    #   MLP per layer per rank:       3*8192*28672/2                          = 352,321,536
    #   x 80 layers = 34,225,520,640; norms 2*8192*80 = 1,310,720;
    #   embedding + LM head, vocabulary-parallel: 2 * 128256*8192/2           = 1,050,673,152
    #   35,277,504,512 elements x 2 B = 70,555,009,024 B = 65.71 GiB of weights on each rank
    #   KV: K and V of 8/2 heads of 128 = 1024 elements x 80 layers x 2 B = 163,840 B per token;
    #   16 sequences x 8192 tokens = 131,072 tokens -> 21,474,836,480 B = 20 GiB
    #   65.71 + 20 = 85.71 GiB > 80 GiB of an H100 SXM: it does not fit. At TP=4 each half, and it fits.
    spec, hw = resolve_model("llama-3.1-70b"), hardware_preset("h100-sxm")
    held = residency(spec, Workload(model="llama-3.1-70b", batch=16, context=8192, layout={"tp": 2}), hw)
    assert held.weights_bytes == 70_555_009_024 and held.kv_bytes == 21_474_836_480
    assert held.capacity_bytes == 80 * GIB and not held.fits
    assert does_not_fit(held) == (
        "the weights (65.7 GiB) and KV cache (20.0 GiB) need 85.7 GiB per rank, more than the 80 GiB one device has: "
        "either the pin is wrong (precision, batch, context, layout or hardware) or what does not fit was kept in host "
        "memory, whose reads this floor does not count"
    )
    assert does_not_fit(residency(spec, Workload(model="llama-3.1-70b", batch=16, context=8192, layout={"tp": 4}), hw)) is None


def test_bound_and_diagnose_say_when_the_pin_does_not_fit(rulebook, tmp_path):
    pin = {"model": "llama-3.1-70b", "hardware": "h100-sxm", "batch": 16, "context": 8192, "layout": {"tp": 2},
           "precision": {"weights": "bf16", "kv_cache": "bf16"}}
    report = compute_bound(Workload.model_validate(pin))
    assert report.memory.weights_bytes == 70_555_009_024 and report.notes == [does_not_fit(report.memory)]
    assert "Bound note: the weights (65.7 GiB) and KV cache (20.0 GiB) need 85.7 GiB" in render_text(diagnose(_case(pin), rulebook))
    path = tmp_path / "w.json"
    path.write_text(json.dumps(pin))
    out = " ".join(run_cli("bound", str(path)).stdout.split())
    assert "note: the weights (65.7 GiB) and KV cache (20.0 GiB) need 85.7 GiB per rank" in out
    fits = compute_bound(Workload.model_validate({**pin, "layout": {"tp": 4}}))
    assert fits.memory.weights_bytes + fits.memory.kv_bytes < 80 * GIB and fits.notes == []
