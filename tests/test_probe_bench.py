"""The H200 bench script's report, rendered from GPU-shaped facts (no GPU in CI)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from probe_examples import H200_DEVICE, bandwidth_facts

from diagnoser.models.probe_report import ProbeReport
from diagnoser.models.probe_results import probe_result

BENCH = Path(__file__).resolve().parents[1] / "bench" / "gpu_probes.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gpu_probes", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report(fraction: float | None) -> ProbeReport:
    results = [probe_result(name="device", status="ok", duration_s=1.0, facts=H200_DEVICE)]
    if fraction is not None:
        facts = bandwidth_facts(gbs=4400.0).model_copy(update={"best_torch_copy_gbs": 4300.0, "fraction_of_best_torch_copy": fraction})
        results.append(probe_result(name="bandwidth", status="ok", duration_s=1.0, facts=facts))
    return ProbeReport(created="2026-11-29T12:00:00+00:00", host="gpu-box", results=results)


def test_card_names_the_results_file(bench):
    assert bench.card_name(report(1.0)) == "NVIDIA H200" and bench.slug("NVIDIA H200") == "nvidia-h200"


def test_goal_is_95_percent_of_the_best_torch_copy(bench):
    assert bench.goal_line(report(4400.0 / 4300.0)).endswith("= 102.3% of the best torch copy (4300.0 GB/s): PASS (goal >= 95%)")
    assert "94.9%" in bench.goal_line(report(0.949)) and bench.goal_line(report(0.949)).split(": ")[-1].startswith("FAIL")
    assert bench.goal_line(report(None)) == "bandwidth probe: not run"


def test_cpu_smoke_run_writes_the_dated_document(bench, tmp_path):
    pytest.importorskip("torch")
    assert bench.main(["--out", str(tmp_path), "--device", "cpu", "--timeout", "60"]) == 0
    (md,) = tmp_path.glob("*.md")
    text = md.read_text()
    assert md.name.endswith("-cpu.md") and text.startswith("# GPU probes on cpu, ")
    assert "- bandwidth " in text and "of the best torch copy" in text and "## Expert GEMM sweep" in text
