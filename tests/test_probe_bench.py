"""The H200 bench script's report, rendered from GPU-shaped facts (no GPU in CI)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from diagnoser.probes.report import ProbeReport, ProbeResult

BENCH = Path(__file__).resolve().parents[1] / "bench" / "gpu_probes.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gpu_probes", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_report() -> ProbeReport:
    bandwidth = {
        "buffer_bytes": 1 << 30, "buffer_over_cache": 17.1, "read_gbs": 4400.0, "copy_gbs": 4250.0,
        "measured_bandwidth_gbs": 4400.0, "best_torch_copy_gbs": 4300.0, "best_torch_copy_variant": "copy_ 1/2 buffer",
        "fraction_of_best_torch_copy": 4400.0 / 4300.0, "theoretical_bandwidth_gbs": 4916.736, "theoretical_source": "nvml",
        "fraction_of_theoretical": 4400.0 / 4916.736,
    }
    graphs = {
        "layers": 32, "hidden": 512, "dtype": "float32", "mode": "eager and CUDA graph",
        "batches": [
            {"batch": 1, "launches_per_step": 320, "eager_step_ms": 2.0, "graph_step_ms": 0.5, "graph_gain": 4.0,
             "launch_cost_us": 4.6875, "replay_matches_eager": True, "captured": True},
        ],
    }
    gemm = {
        "shapes_source": "option", "dtypes": ["bf16"], "peak_tflops": {"bf16": 989.0}, "peak_bandwidth_gbs": 4800.0,
        "dtypes_skipped": {"fp8": "no fp8 here"}, "skipped": [{"name": "down", "dtype": "bf16", "reason": "refused"}],
        "hardware": "NVIDIA H200 SXM 141GB", "scaled_for_cpu": False, "device_name": "NVIDIA H200",
        "shapes": [{"name": "gate_up", "dtype": "bf16", "n": 4096, "k": 7168, "weight_copies": 5, "m_doubling_time_at": 128, "points": [
            {"m": 1, "time_us": 15.3, "tflops": 3.84, "gbs": 3839.0, "fraction_of_peak_flops": 0.0039,
             "fraction_of_peak_bandwidth": 0.80, "fraction_of_roofline": 0.80},
        ]}],
    }
    device = {"devices": [{"name": "NVIDIA H200"}]}
    return ProbeReport(created="2026-11-29T12:00:00+00:00", host="gpu-box", results=[
        ProbeResult(name=n, status="ok", duration_s=1.0, facts=f)
        for n, f in [("device", device), ("bandwidth", bandwidth), ("graphs", graphs), ("gemm", gemm)]
    ])


def test_markdown_has_the_acceptance_figures(bench):
    report = gpu_report()
    assert bench.card_name(report) == "NVIDIA H200" and bench.slug("NVIDIA H200") == "nvidia-h200"
    text = bench.render_markdown(report, "NVIDIA H200", 42.0)
    assert "102.3% of the best torch copy (4300.0 GB/s, copy_ 1/2 buffer): PASS" in text
    assert "| 1 | 320 | 2.000 | 0.500 | 4.00x | 4.69 | True |" in text
    assert "| 1 | 15.3 | 3.84 | 3839 | 0.4% | 80.0% | 80.0% |" in text
    assert "**gate_up, bf16**: N=4096 K=7168, 5 weight copies; time doubles at M=128" in text
    assert "swept bf16; peak TFLOP/s: bf16 989;" in text
    assert "- fp8 not swept: no fp8 here" in text and "- down in bf16 not swept: refused" in text


def test_a_slow_probe_figure_fails_the_goal(bench):
    report = gpu_report()
    report.result("bandwidth").facts["fraction_of_best_torch_copy"] = 0.9
    assert any("FAIL" in line for line in bench.bandwidth_lines(report))


def test_missing_or_failed_probes_are_said(bench):
    report = gpu_report()
    report.results = [r for r in report.results if r.name != "gemm"]
    report.result("graphs").status, report.result("graphs").reason = "failed", "capture refused"
    text = bench.render_markdown(report, "NVIDIA H200", 1.0)
    assert "gemm probe: not run" in text and "graphs probe: failed (capture refused)" in text
