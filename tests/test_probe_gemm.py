"""GEMM sweep: expert shapes from the workload, roofline arithmetic, and a real CPU sweep."""

from __future__ import annotations

import pytest

from diagnoser.errors import InputError
from diagnoser.probes import gemm
from diagnoser.probes.base import ProbeContext, ProbeSkipped
from diagnoser.probes.gemm import doubling_m, expert_shapes, gemm_bytes, hardware_for, roofline_s, run
from conftest import needs_torch
from probe_examples import gemm_facts, gemm_shape, sweep_point

from diagnoser.models.probe_results import GemmFacts, GemmSkip


def test_deepseek_expert_shapes_and_expert_tp():
    # DeepSeek-V3: hidden 7168, expert width 2048; gate and up are fused into one 2 x width GEMM
    assert [(s["n"], s["k"]) for s in expert_shapes("deepseek-v3")] == [(4096, 7168), (7168, 2048)]
    assert [(s["n"], s["k"]) for s in expert_shapes("deepseek-v3", expert_tp=2)] == [(2048, 7168), (7168, 1024)]
    with pytest.raises(ProbeSkipped, match="expert_tp=3"):
        expert_shapes("deepseek-v3", expert_tp=3)


def test_dense_model_uses_mlp_shapes():
    shapes = expert_shapes("llama-3.1-8b")
    assert [(s["n"], s["k"]) for s in shapes] == [(28672, 4096), (4096, 14336)]
    assert "dense mlp" in shapes[0]["name"]


def test_roofline_hand_worked_for_one_token():
    # M=1 through a 7168 x 4096 bf16 expert: (7168 + 7168*4096 + 4096) * 2 B = 58,742,784 B,
    # at 4800 GB/s that is 12.2381 us; the 58.7 MFLOP take 0.059 us at 989 TFLOP/s, so memory wins.
    assert gemm_bytes(1, 4096, 7168, 2) == 58_742_784
    assert roofline_s(1, 4096, 7168, 2, 989e12, 4800) == pytest.approx(12.2381e-6, rel=1e-4)
    # at M=4096 arithmetic dominates: 2*4096*4096*7168 / 989e12 = 243.2 us
    assert roofline_s(4096, 4096, 7168, 2, 989e12, 4800) == pytest.approx(243.2e-6, rel=1e-3)


def test_fp8_bytes_hand_worked():
    # fp8 operands (1 B) and a bf16 result (2 B): 7168 + 29,360,128 + 2 * 4096 = 29,375,488 B,
    # about half the bf16 figure, so a one-token fp8 expert GEMM's floor is 6.12 us at 4800 GB/s
    assert gemm_bytes(1, 4096, 7168, 1, 2) == 29_375_488
    assert roofline_s(1, 4096, 7168, 1, 1979e12, 4800, 2) == pytest.approx(29_375_488 / 4800e9)


def test_hardware_matched_from_device_name_or_named():
    ctx = ProbeContext()
    assert hardware_for(ctx, "NVIDIA H200").name.startswith("NVIDIA H200")
    assert hardware_for(ctx, "NVIDIA A100-SXM4-80GB").name.startswith("NVIDIA A100")
    assert hardware_for(ctx, "Some CPU") is None
    assert hardware_for(ProbeContext(options={"hardware": "b200"}), None).name.startswith("NVIDIA B200")


def test_doubling_point():
    points = [sweep_point(m, t, None) for m, t in [(1, 10), (2, 10.5), (4, 12), (8, 21), (16, 40)]]
    assert doubling_m(points) == 8
    assert doubling_m(points[:3]) is None


@needs_torch
def test_cpu_sweep_over_given_shapes():
    ctx = ProbeContext(options={"gemm_shapes": [{"name": "tiny", "n": 256, "k": 128}], "gemm_max_m": 16})
    facts = run(ctx)
    assert facts.shapes_source == "option" and facts.dtypes == ["fp32"] and facts.m_values == [1, 2, 4, 8, 16]
    (shape,) = facts.shapes
    assert shape.weight_copies >= 1 and shape.dtype == "fp32"
    for point in shape.points:
        seconds = point.time_us / 1e6
        assert point.tflops == pytest.approx(2 * point.m * 256 * 128 / seconds / 1e12)
        assert point.gbs == pytest.approx((point.m * 128 + 128 * 256 + point.m * 256) * 4 / seconds / 1e9)
        assert point.fraction_of_roofline is None  # no peak figures for a CPU


@needs_torch
def test_cpu_scales_model_shapes_down_and_says_so():
    facts = run(ProbeContext(options={"model": "qwen3-30b-a3b", "gemm_max_m": 2}))
    assert facts.scaled_for_cpu is True and facts.shapes_source == "workload model"
    assert [(s.n, s.k) for s in facts.shapes] == [(512, 512), (512, 512)]


@needs_torch
def test_fp8_path_runs_on_the_cpu_and_counts_one_byte_operands():
    ctx = ProbeContext(options={"gemm_shapes": [{"name": "tiny", "n": 256, "k": 128}], "gemm_max_m": 4, "gemm_dtypes": ["fp32", "fp8"]})
    facts = run(ctx)
    assert facts.dtypes == ["fp32", "fp8"] and facts.skipped == []
    fp32, fp8 = facts.shapes
    assert (fp32.dtype, fp8.dtype) == ("fp32", "fp8")
    for point in fp8.points:
        seconds = point.time_us / 1e6
        assert point.gbs == pytest.approx(((point.m * 128 + 128 * 256) * 1 + point.m * 256 * 2) / seconds / 1e9)


@needs_torch
def test_fp8_refuses_unaligned_shapes_and_says_so():
    ctx = ProbeContext(options={"gemm_shapes": [{"name": "odd", "n": 250, "k": 128}], "gemm_max_m": 2, "gemm_dtypes": ["fp32", "fp8"]})
    facts = run(ctx)
    assert [s.dtype for s in facts.shapes] == ["fp32"]
    assert facts.skipped == [GemmSkip(name="odd", dtype="fp8", reason="fp8 GEMMs need N and K divisible by 16, got 250x128")]


def test_dtype_choice_per_device(monkeypatch):
    pytest.importorskip("torch")
    assert gemm.sweep_dtypes(ProbeContext()) == (["fp32"], {})
    monkeypatch.setattr(gemm, "fp8_unsupported", lambda device: None)
    assert gemm.sweep_dtypes(ProbeContext(device="cuda")) == (["bf16", "fp8"], {})
    monkeypatch.setattr(gemm, "fp8_unsupported", lambda device: "compute capability 8.0 has no fp8 tensor cores (needs 8.9 or newer)")
    assert gemm.sweep_dtypes(ProbeContext(device="cuda")) == (["bf16"], {"fp8": "compute capability 8.0 has no fp8 tensor cores (needs 8.9 or newer)"})
    with pytest.raises(InputError, match=r"unknown dtype\(s\) \['int3'\]"):
        gemm.sweep_dtypes(ProbeContext(options={"gemm_dtypes": ["int3"]}))


def test_an_a100_has_no_fp8(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    assert gemm.fp8_unsupported("cuda") == "compute capability 8.0 has no fp8 tensor cores (needs 8.9 or newer)"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert gemm.fp8_unsupported("cuda") is None


@needs_torch
def test_only_impossible_dtypes_skip_the_probe(monkeypatch):
    monkeypatch.setattr(gemm, "fp8_unsupported", lambda device: "no fp8 here")
    with pytest.raises(ProbeSkipped, match="fp8: no fp8 here"):
        run(ProbeContext(options={"gemm_dtypes": ["fp8"]}))


def sweep_facts(fractions: dict[int, float] | None) -> GemmFacts:
    """GPU-shaped facts of one shape; ``None`` nulls the fractions, as a run without a peak figure does."""
    points = [sweep_point(m, 10.0 + m, fractions[m] if fractions else None) for m in (1, 2, 4)]
    return gemm_facts([gemm_shape("qwen3-30b-a3b expert gate_up", "fp8", 1536, 2048, points)])


def test_sweep_points_with_a_bandwidth_fraction_feed_the_case():
    (first, *_, last) = gemm.to_observations(sweep_facts({1: 0.2, 2: 0.3, 4: 0.45}))["gemm_sweep"]
    assert (first.shape, first.dtype, first.m, first.time_us, first.bw_fraction) == ("qwen3-30b-a3b expert gate_up", "fp8", 1, 11.0, 0.2)
    assert last.m == 4 and last.bw_fraction == 0.45
    # a CPU run has no peak figure to hold the served kernel against: nothing to feed
    assert gemm.to_observations(sweep_facts(None)) == {}


def test_the_yardstick_at_the_served_rows_by_hand():
    from diagnoser.engine.facts import gemm_reference
    from diagnoser.models.observations import GemmPoint

    def point(shape, dtype, m, t, f):
        return GemmPoint(shape=shape, dtype=dtype, m=m, time_us=t, bw_fraction=f)

    pts = [
        point("gate_up", "bf16", 1, 10, 0.4), point("gate_up", "bf16", 4, 10, 0.6),
        point("down", "bf16", 1, 5, 0.2), point("down", "bf16", 4, 5, 0.3),
    ]
    # M = 2 is halfway in log2 from 1 to 4: gate_up 0.5 over 10 us, down 0.25 over 5 us -> 6.25 / 15
    assert gemm_reference(pts, 2) == (pytest.approx(6.25 / 15), "bf16")
    # held at the sweep's ends: below M = 1 the M = 1 points, above M = 4 the M = 4 points
    assert gemm_reference(pts, 0.5)[0] == pytest.approx(5 / 15) and gemm_reference(pts, 100)[0] == pytest.approx(7.5 / 15)
    # the best dtype is the yardstick
    fp8 = [point("gate_up", "fp8", 1, 6, 0.7), point("gate_up", "fp8", 4, 6, 0.7)]
    assert gemm_reference(pts + fp8, 2) == (pytest.approx(0.7), "fp8")
    assert gemm_reference([], 2) is None
