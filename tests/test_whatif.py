"""What-if math against the reference's hand-worked numbers, and the calculator commands."""

import json

import pytest

from conftest import run_cli
from diagnoser.whatif import acceptance_from_rate, amdahl, batch_curve, bounded_gain, expected_tokens_per_cycle, speculation


def test_amdahl_reference_launch_reduction():
    # 4.5 device + 2 comm + 1.5 launch + 1 other = 9 ms; launch 1.5 -> 0.5 gives 8 ms, 9/8 = 1.125x.
    r = amdahl({"device": 4.5, "comm": 2, "launch": 1.5, "other": 1}, "launch", 0.5)
    assert r.before_ms == pytest.approx(9.0)
    assert r.after_ms == pytest.approx(8.0)
    assert r.speedup == pytest.approx(1.125)
    assert r.saved_ms == pytest.approx(1.0)
    assert r.parts_after_ms["launch"] == 0.5 and r.parts_ms["launch"] == 1.5


@pytest.mark.parametrize("parts,part,new", [({"a": 1.0}, "b", 0.5), ({"a": 1.0}, "a", -1.0), ({"a": 1.0}, "a", 0.0)])
def test_amdahl_rejects_bad_input(parts, part, new):
    with pytest.raises(ValueError):
        amdahl(parts, part, new)


def test_expected_tokens_reference_values():
    assert expected_tokens_per_cycle(0.8, 7) == pytest.approx(4.161, abs=5e-4)  # (1 - 0.8^8) / 0.2
    assert expected_tokens_per_cycle(0.2, 7) == pytest.approx(1.25, abs=1e-4)
    assert expected_tokens_per_cycle(1.0, 7) == 8.0
    assert expected_tokens_per_cycle(0.0, 7) == 1.0  # only the bonus/correction token
    # the closed form equals the series 1 + a + ... + a^k
    assert expected_tokens_per_cycle(0.55, 5) == pytest.approx(sum(0.55**i for i in range(6)))


def test_acceptance_from_the_counters_share_by_hand():
    # a = 0.5, k = 3: a cycle emits 1 + 0.5 + 0.25 + 0.125 = 1.875 tokens, so it keeps 0.875 of 3 drafts (29.17 %)
    assert acceptance_from_rate(0.875 / 3, 3) == pytest.approx(0.5, abs=1e-9)
    # one draft: the share kept is the acceptance itself
    assert acceptance_from_rate(0.56, 1) == pytest.approx(0.56, abs=1e-9)
    assert acceptance_from_rate(0.0, 4) == pytest.approx(0.0, abs=1e-9)
    assert acceptance_from_rate(1.0, 4) == pytest.approx(1.0, abs=1e-9)
    # 35 % of 4 drafts kept is a = 0.622, which keeps 50.4 % of 2 drafts: later drafts are kept less often
    a = acceptance_from_rate(0.35, 4)
    assert a == pytest.approx(0.622, abs=1e-3)
    assert (expected_tokens_per_cycle(a, 2) - 1) / 2 == pytest.approx(0.504, abs=1e-3)
    with pytest.raises(ValueError):
        acceptance_from_rate(1.2, 3)


def test_speculation_reference_speedup_and_slowdown():
    win = speculation(0.8, 7, verify_ms=12, draft_ms=3, other_ms=1, ordinary_step_ms=9)
    assert win.cycle_ms == 16
    assert win.speedup == pytest.approx(4.161 * 9 / 16, abs=1e-3)
    assert round(win.speedup, 2) == 2.34 and not win.is_slowdown
    loss = speculation(0.2, 7, verify_ms=12, draft_ms=3, other_ms=1, ordinary_step_ms=9)
    assert round(loss.speedup, 2) == 0.70 and loss.is_slowdown
    with pytest.raises(ValueError):
        speculation(1.2, 7, 12, 3, 1, 9)


def test_bounded_gain_is_capped_by_parent_and_step():
    g = bounded_gain(10, 4, cap_ms=2.5, cap_name="launch-gaps")
    assert (g.removable_ms, g.after_ms, g.capped_by) == (2.5, 7.5, "launch-gaps")
    assert g.speedup == pytest.approx(10 / 7.5)
    whole = bounded_gain(10, 50)
    assert whole.after_ms > 0 and whole.capped_by is None


def test_batch_curve_keeps_the_overhead_above_the_floor():
    # measured 20 ms at batch 1 over a 5 ms floor: 15 ms of overhead carried to every batch.
    points = batch_curve({1: 5.0, 8: 6.0, 32: 9.0}, base_batch=1, base_step_ms=20.0)
    by_batch = {p.batch: p for p in points}
    assert by_batch[8].step_ms == pytest.approx(21.0)
    assert by_batch[8].aggregate_tokens_per_s == pytest.approx(8 / 21.0 * 1e3)
    assert by_batch[32].per_user_tokens_per_s == pytest.approx(1e3 / 24.0)
    with pytest.raises(ValueError):
        batch_curve({8: 6.0}, base_batch=1, base_step_ms=20.0)


def test_cli_amdahl_and_speculate():
    out = run_cli("whatif", "amdahl", "--part", "device=4.5", "--part", "comm=2", "--part", "launch=1.5", "--part", "other=1", "--set", "launch=0.5")
    assert out.returncode == 0, out.stderr
    assert "= 9 ms" in out.stdout and "= 8 ms" in out.stdout and "1.125x" in out.stdout
    out = run_cli("whatif", "speculate", "-a", "0.2", "-k", "7", "--verify-ms", "12", "--draft-ms", "3", "--other-ms", "1", "--ordinary-ms", "9")
    assert out.returncode == 0, out.stderr
    assert "1.25" in out.stdout and "0.70x, a slowdown" in out.stdout
    out = run_cli("whatif", "speculate", "-a", "1", "-k", "7", "--verify-ms", "12", "--draft-ms", "3", "--ordinary-ms", "9", "--json")
    assert json.loads(out.stdout)["expected_tokens_per_cycle"] == 8.0


def test_cli_speculate_from_the_counters_acceptance_rate():
    # vLLM's counters: 35 % of 4 drafts accepted is 1 + 4 x 0.35 = 2.4 tokens a cycle; 2.4 x 69 / 90 = 1.84x
    out = run_cli("whatif", "speculate", "--acceptance-rate", "0.35", "-k", "4", "--verify-ms", "80", "--draft-ms", "10",
                  "--ordinary-ms", "69", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["expected_tokens_per_cycle"] == pytest.approx(2.4, abs=1e-9)
    assert data["acceptance"] == pytest.approx(0.622, abs=1e-3) and data["speedup"] == pytest.approx(1.84, abs=1e-2)
    for given in ((), ("-a", "0.5", "--acceptance-rate", "0.35")):
        bad = run_cli("whatif", "speculate", *given, "-k", "4", "--verify-ms", "80", "--draft-ms", "10", "--ordinary-ms", "69")
        assert bad.returncode == 2 and "one of them" in bad.stderr and "Traceback" not in bad.stderr


def test_every_calculator_states_what_it_assumes():
    # the reference's caveats travel with the figures: accepted-prefix model, costs measured
    # together, the Amdahl part only, and the concurrency regime for batching
    out = run_cli("whatif", "speculate", "-a", "0.8", "-k", "7", "--verify-ms", "12", "--draft-ms", "3", "--other-ms", "1", "--ordinary-ms", "9")
    assert "accepted-prefix length" in out.stdout and "fewer target calls alone is no win" in out.stdout
    data = json.loads(run_cli("whatif", "speculate", "-a", "0.8", "-k", "7", "--verify-ms", "12", "--draft-ms", "3", "--ordinary-ms", "9", "--json").stdout)
    assert any("not of every decoder" in a for a in data["assumptions"])
    out = run_cli("whatif", "amdahl", "--part", "launch=1.5", "--part", "other=7.5", "--set", "launch=0.5", "--json")
    assert any("removes only the part it replaces" in a for a in json.loads(out.stdout)["assumptions"])


def test_cli_whatif_bad_input_is_one_line():
    out = run_cli("whatif", "amdahl", "--part", "device=4.5", "--set", "launch=0.5")
    assert out.returncode == 2 and "no part named 'launch'" in out.stderr and "Traceback" not in out.stderr
    out = run_cli("whatif", "amdahl", "--part", "device", "--set", "device=1")
    assert out.returncode == 2 and "expected NAME=MS" in out.stderr


def test_cli_batch_uses_the_bound(tmp_path):
    from diagnoser.bound import compute_bound
    from diagnoser.models.workload import Workload

    doc = {"model": "qwen3-30b-a3b", "hardware": "h100-sxm", "context": 2048, "batch": 1, "observed": {"step_ms": 12.0}}
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps(doc))
    out = run_cli("whatif", "batch", str(path), "--batch", "1,16", "--json")
    assert out.returncode == 0, out.stderr
    points = {p["batch"]: p for p in json.loads(out.stdout)["points"]}
    floor1 = compute_bound(Workload.model_validate(doc)).step_floor_ms
    floor16 = compute_bound(Workload.model_validate({**doc, "batch": 16})).step_floor_ms
    assert floor16 > floor1  # the expert union and KV reads grow with the batch
    assert points[1]["step_ms"] == pytest.approx(12.0)
    assert points[16]["step_ms"] == pytest.approx(12.0 - floor1 + floor16)
    assert points[16]["aggregate_tokens_per_s"] == pytest.approx(16e3 / points[16]["step_ms"])
    text = run_cli("whatif", "batch", str(path), "--batch", "1,16").stdout
    assert "quiet periods and freshly started replicas" in text and "the step is not fixed" in text
    out = run_cli("whatif", "batch", str(path), "--batch", "x")
    assert out.returncode == 2


def test_cli_amdahl_from_a_case_budget(tmp_path):
    case = tmp_path / "case.yaml"
    case.write_text("observations:\n  budget: {step_ms: 9, device_ms: 4.5, exposed_comm_ms: 2, launch_ms: 1.5, host_ms: 1}\n")
    out = run_cli("whatif", "amdahl", "--case", str(case), "--set", "launch=0.5", "--json")
    r = json.loads(out.stdout)
    assert r["before_ms"] == pytest.approx(9) and r["after_ms"] == pytest.approx(8) and r["speedup"] == pytest.approx(1.125)
    both = run_cli("whatif", "amdahl", "--case", str(case), "--part", "a=1", "--set", "a=0.5")
    assert both.returncode == 2 and "not both" in both.stderr


def test_cli_batch_bad_batch_names_the_file(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("model: qwen3-8b\nlayout: {dp: 2}\nbatch: 2\nobserved: {step_ms: 5}\n")
    out = run_cli("whatif", "batch", str(path), "--batch", "3")
    assert out.returncode == 2 and f"{path}: at batch 3" in out.stderr and "does not split over dp=2" in out.stderr
    no_step = tmp_path / "n.yaml"
    no_step.write_text("model: qwen3-8b\n")
    out = run_cli("whatif", "batch", str(no_step), "--batch", "4")
    assert out.returncode == 2 and "observed.step_ms or observed.tokens_per_s is needed" in out.stderr


# llama-3.1-8b in bf16: 8.03e9 parameters (16.06 GB of weights, embedding and head untied) and
# 32 layers x 8 KV heads x 128 x (K, V) x 2 bytes = 131,072 bytes of KV cache per token.
LLAMA_8B_WEIGHT_BYTES = (
    32 * (4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 4096 + 2 * 128256 * 4096
) * 2
KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2


def test_capacity_counts_every_resident_weight_and_the_whole_kv_cache():
    from diagnoser.bound.capacity import residency
    from diagnoser.models.hardware import hardware_preset
    from diagnoser.models.model_spec import resolve_model
    from diagnoser.models.workload import Workload

    assert LLAMA_8B_WEIGHT_BYTES == pytest.approx(16.06e9, rel=1e-3)
    held = residency(resolve_model("llama-3.1-8b"), Workload(model="llama-3.1-8b", batch=64, context=4096), hardware_preset("h100-sxm"))
    assert held.weights_bytes == pytest.approx(LLAMA_8B_WEIGHT_BYTES)
    assert held.kv_bytes == pytest.approx(64 * 4096 * KV_BYTES_PER_TOKEN)  # 34.4 GB
    assert held.fits and held.capacity_bytes == 80 * 2**30


def test_batch_stops_at_the_first_size_that_does_not_fit(tmp_path):
    # (85.90 GB - 16.06 GB) / (4096 x 131,072 B) = 130.08 sequences of 4096 tokens fit on one 80 GiB H100
    room = (80 * 2**30 - LLAMA_8B_WEIGHT_BYTES) / (4096 * KV_BYTES_PER_TOKEN)
    assert 130 < room < 131
    path = tmp_path / "w.yaml"
    path.write_text("model: llama-3.1-8b\nhardware: h100-sxm\ncontext: 4096\nbatch: 8\nobserved: {tokens_per_s: 800}\n")
    out = run_cli("whatif", "batch", str(path), "--batch", "1,64,130,131,512", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [p["batch"] for p in result["points"]] == [1, 8, 64, 130]
    assert result["does_not_fit"]["batch"] == 131
    assert result["does_not_fit"]["needed_gib"] > result["does_not_fit"]["capacity_gib"] == 80
    # anchored on tokens_per_s: 8 sequences at 800 tokens/s is a 10 ms step
    assert {p["batch"]: p for p in result["points"]}[8]["step_ms"] == pytest.approx(10.0)
    steps = [p["step_ms"] for p in result["points"]]
    assert steps == sorted(steps)  # a larger batch is never shown as a shorter step
    text = run_cli("whatif", "batch", str(path), "--batch", "1,131").stdout
    assert "batch 131 does not fit" in text and "larger sizes were not estimated" in text


def test_batch_refuses_a_measured_batch_that_cannot_fit(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("model: llama-3.1-8b\nhardware: h100-sxm\ncontext: 4096\nbatch: 256\nobserved: {step_ms: 30}\n")
    out = run_cli("whatif", "batch", str(path), "--batch", "512")
    assert out.returncode == 2 and "at the measured batch 256" in out.stderr and "the pin is wrong" in out.stderr


def test_a_measured_histogram_is_set_aside_for_every_size(tmp_path):
    path = tmp_path / "w.yaml"
    hist = [8] * 16 + [0] * 112
    path.write_text(json.dumps({"model": "qwen3-30b-a3b", "hardware": "h100-sxm", "context": 1024, "batch": 16,
                                "expert_token_histogram": hist, "observed": {"step_ms": 20.0}}))
    result = json.loads(run_cli("whatif", "batch", str(path), "--batch", "8,32", "--json").stdout)
    steps = [p["step_ms"] for p in result["points"]]
    assert steps == sorted(steps) and any("uniform routing" in n for n in result["notes"])
