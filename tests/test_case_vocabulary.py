"""The case vocabulary for real evidence: documented, validated field by field, and version 1 still loads."""

import json

import pytest

from conftest import REPO, run_cli
from diagnoser.engine import diagnose, load_rulebook
from diagnoser.engine.comparison import repeat_decline, run_deltas, sweep_points
from diagnoser.engine.facts import reference_step_ms, with_derived_budget
from diagnoser.bound import compute_bound
from diagnoser.models.case import Case, load_case
from diagnoser.models.workload import Workload
from diagnoser.models.serving import Run

NEW_MODELS = {
    "BudgetShares", "Expected", "HostCost", "MemoryObs", "Percentiles", "PlatformObs", "RoutingObs", "Run",
    "RunFigures", "ServingMetrics", "StreamObs",
}


def test_schema_case_documents_every_field():
    schema = json.loads(run_cli("schema", "case").stdout)
    defs = schema["$defs"]
    assert NEW_MODELS <= set(defs)
    undocumented = [f"{m}.{p}" for m, d in defs.items() for p, v in d.get("properties", {}).items() if "description" not in v]
    assert undocumented == []  # every field of every section, old and new
    assert all("description" in v for v in schema["properties"].values())
    observations = defs["Observations"]["properties"]
    for field in ("metrics", "expected", "runs", "host_costs", "routing", "memory", "platform", "stream", "budget_shares"):
        assert observations[field].get("description"), field


def test_a_version_1_case_loads_unchanged(tmp_path):
    path = tmp_path / "v1.yaml"
    text = "schema_version: 1\nobservations:\n  budget: {step_ms: 9, device_ms: 5.5, launch_ms: 2.5, host_ms: 1}\n  server: {cuda_graphs: false}\n"
    path.write_text(text)
    case = load_case(path)
    assert case.schema_version == 1 and case.observations.budget.launch_ms == 2.5
    assert path.read_text() == text
    assert run_cli("diagnose", str(path)).returncode == 0
    path.write_text("schema_version: 3\n")
    out = run_cli("diagnose", str(path))
    assert out.returncode == 2 and "schema_version 3 not supported (this diagnoser reads 2, 1)" in out.stderr


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("observations: {runs: [{name: a, figures: {}}]}", "observations.runs.0.figures"),
        ("observations: {metrics: {tpot_ms: {p50: -3}}}", "observations.metrics.tpot_ms.p50"),
        ("observations: {host_costs: [{name: tokenizing, ms_per_step: 2}]}", "observations.host_costs.0.name"),
        ("observations: {budget_shares: {device: 0.7, launch: 0.5}}", "observations.budget_shares"),
        ("observations: {expected: {kind: a_hunch}}", "observations.expected.kind"),
        ("observations: {graph: {capture_unit: requests}}", "observations.graph.capture_unit"),
        ("observations: {metrics: {tpot_ms: {p50: .nan}}}", "observations.metrics.tpot_ms.p50"),
        ("observations: {host_costs: [{name: detokenize, ms_per_step: .inf}]}", "observations.host_costs.0.ms_per_step"),
        ("observations: {runs: [{name: a, figures: {per_token_ms: -.inf}}]}", "observations.runs.0.figures.per_token_ms"),
    ],
)
def test_bad_fields_are_one_line_naming_the_field(tmp_path, text, field):
    path = tmp_path / "case.yaml"
    path.write_text(text + "\n")
    out = run_cli("diagnose", str(path))
    assert out.returncode == 2 and field in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_gpu_named_as_tools_print_it_is_matched_or_marked_unknown():
    pinned = {"model": "qwen3-8b", "batch": 1, "context": 1024, "observed": {"step_ms": 12}}
    h100 = diagnose(Case.model_validate({"workload": {**pinned, "hardware": "NVIDIA H100 80GB HBM3"}}), load_rulebook())
    assert h100.bound is not None and h100.bound.bandwidth_gbs == pytest.approx(3350)
    rtx4090 = diagnose(Case.model_validate({"workload": {**pinned, "hardware": "RTX 4090"}}), load_rulebook())
    assert rtx4090.bound is not None and rtx4090.bound.bandwidth_gbs == pytest.approx(1008)
    pair = diagnose(Case.model_validate({"workload": {**pinned, "hardware": "RTX 3090, RTX 3090"}}), load_rulebook())
    assert pair.bound is not None and pair.bound.bandwidth_gbs == pytest.approx(936)
    for name in ("RTX 4090 Laptop GPU", "Radeon Pro W7900", "NVIDIA GeForce RTX 3090 + 2x NVIDIA GeForce RTX 3060"):
        d = diagnose(Case.model_validate({"workload": {**pinned, "hardware": name}}), load_rulebook())
        assert d.bound is None and f"GPU {name!r} matches no preset (unknown)" in d.bound_note
    unnamed = diagnose(Case.model_validate({"workload": pinned}), load_rulebook())
    assert unnamed.bound is None and "GPU is not pinned" in unnamed.bound_note


def test_a_device_no_preset_knows_is_timed_by_its_measured_bandwidth_only():
    """qwen3-8b in bf16 at batch 1 and context 0 reads its weights once: the same bytes on an H100 preset and on an
    unlisted device, so the unlisted floor is the H100 floor scaled by the bandwidths (3350 / 933), compute uncounted."""
    pinned = {"model": "qwen3-8b", "batch": 1, "context": 0, "precision": {"weights": "bf16", "kv_cache": "bf16"},
              "observed": {"step_ms": 70}}
    h100 = diagnose(Case.model_validate({"workload": {**pinned, "hardware": "h100-sxm"}}), load_rulebook())
    name = "NVIDIA A30"  # no preset: its datasheet figures were not confirmed
    pro = diagnose(Case.model_validate({"workload": {**pinned, "hardware": name, "measured_bandwidth_gbs": 933}}),
                   load_rulebook())
    assert pro.bound is not None and pro.bound_note is None
    assert pro.bound.floor_ms == pytest.approx(h100.bound.floor_ms * 3350 / 933)
    assert pro.bound.critical_rank_bytes == pytest.approx(h100.bound.critical_rank_bytes)
    assert pro.bound.resident_share is None and pro.bound.limited_by == "memory"
    assert any(f"{name!r} is not a preset" in n and "compute is not counted" in n for n in pro.bound.notes)


def test_a_preset_of_its_bandwidth_only_says_what_its_floor_leaves_out():
    """Apple publishes each chip's memory bandwidth, not its memory size (it varies by machine) or its peak FLOP/s:
    the floor is the bytes at that bandwidth (qwen3-8b's 16.4 GB at 800 GB/s on an M2 Ultra), with no fit checked."""
    pinned = {"model": "qwen3-8b", "batch": 1, "context": 0, "precision": {"weights": "bf16", "kv_cache": "bf16"},
              "observed": {"step_ms": 70}}
    h100 = diagnose(Case.model_validate({"workload": {**pinned, "hardware": "h100-sxm"}}), load_rulebook())
    mac = diagnose(Case.model_validate({"workload": {**pinned, "hardware": "Apple M2 Ultra (192 GB)"}}), load_rulebook())
    assert mac.bound is not None and mac.bound.bandwidth_gbs == 800
    assert mac.bound.floor_ms == pytest.approx(h100.bound.floor_ms * 3350 / 800)
    assert mac.bound.resident_share is None
    assert any("'Apple M2 Ultra' is a preset of its published bandwidth only" in n for n in mac.bound.notes)


def test_a_model_no_preset_knows_is_a_note_on_the_bound_not_an_error():
    case = {"workload": {"model": "org/Some-Model-27B", "hardware": "h100-sxm", "batch": 1},
            "observations": {"metrics": {"boundary": "engine", "per_user_tokens_per_s": 20},
                             "server": {"cuda_graphs": False}}}
    d = diagnose(Case.model_validate(case), load_rulebook())
    assert d.bound is None and "model 'org/Some-Model-27B' is neither a preset nor a readable config.json" in d.bound_note
    assert d.hypotheses and d.hypotheses[0].id.startswith("graphs-off")
    # an inline config of a family the bound cannot read says so, not that no config was given
    case["workload"]["model"] = {"architectures": ["GPT2LMHeadModel"], "hidden_size": 768, "num_hidden_layers": 12,
                                 "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 50257}
    d = diagnose(Case.model_validate(case), load_rulebook())
    assert d.bound is None and d.bound_note.startswith("no bound: inline model config: architecture 'GPT2LMHeadModel' not supported")


def test_runs_differing_in_one_setting_give_a_delta_and_several_settings_are_confounded():
    runs = [
        Run.model_validate({"name": "old", "baseline": True, "settings": {"engine_version": "1", "tp": 2}, "figures": {"output_tokens_per_s": 1000}}),
        Run.model_validate({"name": "new", "settings": {"engine_version": "2", "tp": 2}, "figures": {"output_tokens_per_s": 800}}),
        Run.model_validate({"name": "both", "settings": {"engine_version": "2", "tp": 4}, "figures": {"output_tokens_per_s": 900}}),
    ]
    one, both = run_deltas(runs)
    # 1000 and 800 aggregate tokens/s are 1.0 and 1.25 ms per token: 1.25x slower
    assert (one.setting, one.before, one.after, one.figure) == ("engine_version", "1", "2", "output_tokens_per_s")
    assert one.base_time == pytest.approx(1.0) and one.other_time == pytest.approx(1.25) and one.ratio == pytest.approx(1.25)
    assert both.setting == "several" and both.changed == ("engine_version", "tp")


def test_repeats_in_the_order_they_ran_say_whether_the_first_was_the_fastest():
    def run(figures, repeats):
        return Run.model_validate({"name": "r", "figures": figures, "repeats": repeats})

    figure, decline = repeat_decline(run({"per_user_tokens_per_s": 10.8}, [19.3, 10.8, 12.1]))
    assert figure == "per_user_tokens_per_s" and decline == pytest.approx(19.3 / 12.1)
    figure, decline = repeat_decline(run({"per_token_ms": 27}, [21, 27, 30]))  # a time: smaller is faster
    assert figure == "per_token_ms" and decline == pytest.approx(27 / 21)
    assert repeat_decline(run({"per_token_ms": 21}, [30, 27, 21])) is None  # the first was the slowest
    assert repeat_decline(run({"per_user_tokens_per_s": 50}, [19.3, 10.8])) is None  # no figure inside the repeats' band
    # two stated figures inside the band: which one the repeats are of is not known
    assert repeat_decline(run({"per_token_ms": 20, "per_user_tokens_per_s": 20}, [19, 21])) is None


def test_a_context_sweep_from_runs_needs_every_other_setting_equal():
    runs = [
        Run.model_validate({"name": f"c{c}", "settings": {"context": c, "tp": 1}, "figures": {"per_user_tokens_per_s": tps}})
        for c, tps in ((1000, 125), (8000, 100))
    ]
    assert sweep_points(runs, "context") == [(1000.0, 8.0), (8000.0, 10.0)]
    runs[1].settings["tp"] = 2
    assert sweep_points(runs, "context") == []


def test_budget_shares_become_a_budget_of_the_measured_per_token_time():
    case = Case.model_validate(
        {"observations": {"metrics": {"tpot_ms": {"p50": 20}}, "budget_shares": {"device": 0.6, "launch": 0.3, "host": 0.1}}}
    )
    assert reference_step_ms(case) == 20
    budget = with_derived_budget(case).observations.budget
    assert (budget.step_ms, budget.device_ms, budget.launch_ms, budget.host_ms) == pytest.approx((20, 12, 6, 2))
    launch = next(h for h in diagnose(case, load_rulebook()).hypotheses if h.rule == "launch-gaps")
    assert launch.grade.value == "measured" and launch.gain.removable_ms == pytest.approx(6)


def test_every_development_case_loads_and_diagnoses():
    folder = REPO / "tests" / "data" / "cases"
    cases = sorted(folder.glob("[DE][0-9][0-9].yaml"))
    assert len(cases) == 44
    book = load_rulebook()
    for path in cases:
        d = diagnose(load_case(path), book)
        assert d.rule_errors == [], path.name


def test_engine_flag_names_in_runs_are_read_as_the_known_setting():
    run = Run.model_validate(
        {"name": "a", "settings": {"enforce_eager": True, "gpu_memory_utilization": 0.05, "engine_version": "1"}, "figures": {"per_token_ms": 3}}
    )
    assert run.settings == {"cuda_graphs": False, "kv_cache_capacity": 0.05, "engine_version": "1"}
    with pytest.raises(ValueError, match="settings give max_context twice"):
        Run.model_validate({"name": "b", "settings": {"max_model_len": 4096, "max_context": 8192}, "figures": {"per_token_ms": 3}})


def test_a_hardware_with_its_count_is_the_device_and_the_device_count():
    def settings(**given):
        return Run.model_validate({"name": "a", "settings": given, "figures": {"per_token_ms": 3}}).settings

    assert settings(hardware="4x A100 PCIe") == {"hardware": "A100 PCIe", "devices": 4}
    assert settings(hardware="8 × H100", gpus=8) == {"hardware": "H100", "devices": 8}
    # a count stated apart that disagrees keeps both as written; a name with no leading count is a name
    assert settings(hardware="2x RTX 3090", devices=4) == {"hardware": "2x RTX 3090", "devices": 4}
    assert settings(hardware="lab-2x-gb10") == {"hardware": "lab-2x-gb10"}


def test_a_link_beside_a_change_to_or_from_one_device_is_that_change():
    def run(name, baseline=False, **given):
        return Run.model_validate({"name": name, "baseline": baseline, "settings": given, "figures": {"per_token_ms": 3 if baseline else 4}})

    (one,) = run_deltas([run("four", True, devices=4, interconnect="pcie"), run("one", devices=1, interconnect="none")])
    assert one.values == (("devices", "4", "1"),)
    (both,) = run_deltas([run("four", True, devices=4, interconnect="pcie"), run("eight", devices=8, interconnect="nvlink")])
    assert both.changed == ("devices", "interconnect")


def test_a_format_the_datasheet_gives_no_peak_for_is_said_not_timed_as_free():
    """NVIDIA publishes the GB10's FP4 and FP32 peaks, not a BF16 one: a bf16 step's arithmetic is left out of the compute
    floor, and the bound says so instead of counting it as free; on an H100 the same step is timed whole."""
    pinned = {"model": "qwen3-8b", "hardware": "NVIDIA GB10", "batch": 1, "context": 0, "observed": {"step_ms": 70}}
    bf16 = compute_bound(Workload.model_validate({**pinned, "precision": {"weights": "bf16", "kv_cache": "bf16"}}))
    assert bf16.per_rank[0].untimed_flops_dtypes == ["bf16"] and bf16.compute_floor_ms == 0
    assert any("no datasheet peak for bf16" in n for n in bf16.notes)
    h100 = compute_bound(Workload.model_validate({**pinned, "hardware": "h100-sxm", "precision": {"weights": "bf16", "kv_cache": "bf16"}}))
    assert h100.per_rank[0].untimed_flops_dtypes == [] and h100.compute_floor_ms > 0
    assert not any("no datasheet peak" in n for n in h100.notes)
