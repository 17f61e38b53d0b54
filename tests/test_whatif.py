"""What-if math against the reference's hand-worked numbers, and the calculator commands."""

import json

import pytest

from conftest import run_cli
from diagnoser.whatif import amdahl, batch_curve, bounded_gain, expected_tokens_per_cycle, speculation


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
    points = {p["batch"]: p for p in json.loads(out.stdout)}
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
    assert out.returncode == 2 and "observed.step_ms is needed" in out.stderr
