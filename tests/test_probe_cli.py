"""`diagnoser probe` end to end, in a subprocess as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from diagnoser.models.case import load_case
from diagnoser.probes.report import ProbeReport
from conftest import needs_torch

GPU_PRESENT = subprocess.run(
    [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True
).stdout.strip() == "True"


def diagnoser(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "diagnoser", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=240
    )


@pytest.mark.skipif(GPU_PRESENT, reason="this acceptance describes a machine without a GPU")
@needs_torch
def test_default_run_on_a_cpu_machine_is_a_valid_report():
    done = diagnoser("probe", "--json")
    assert done.returncode == 0, done.stderr
    report = ProbeReport.model_validate_json(done.stdout)
    status = {r.name: r for r in report.results}
    assert list(status) == ["device", "bandwidth", "gemm", "graphs", "collectives", "client", "context_sweep"]
    assert status["device"].status == "ok" and status["device"].facts["nvml"].startswith("no NVIDIA driver")
    assert status["bandwidth"].status == "ok" and status["bandwidth"].facts["device"] == "cpu"
    assert status["bandwidth"].facts["measured_bandwidth_gbs"] > 0
    assert status["graphs"].facts["mode"] == "eager only" and status["graphs"].facts["graph_skipped_reason"]
    for name in ("client", "context_sweep"):
        assert status[name].status in {"skipped", "failed"} and status[name].reason


@needs_torch
def test_case_is_read_for_shapes_and_written_back(tmp_path):
    case = tmp_path / "case.yaml"
    case.write_text(
        "title: mixtral on one box\nworkload:\n  model: mixtral-8x7b\n  hardware: h200\n  batch: 6\n  layout: {tp: 2, dp: 2}\n"
    )
    before = case.read_text()
    done = diagnoser(
        "probe", "--json", "--only", "bandwidth,gemm,graphs", "--case", str(case),
        "--option", "bandwidth_buffer_bytes=8388608", "--option", "gemm_max_m=2", "--option", "graph_layers=1",
    )
    assert done.returncode == 0, done.stderr
    report = ProbeReport.model_validate_json(done.stdout)
    gemm = report.result("gemm")
    assert gemm.facts["shapes_source"] == "workload model"
    # Mixtral experts are 14336 wide; TP 2 with EP 1 shards each expert in two (scaled to 512 on a CPU)
    assert gemm.facts["shapes"][0]["name"].startswith("mixtral-8x7b expert")
    # batch 6 over dp 2: each attention rank decodes 3 sequences
    assert [p["batch"] for p in report.result("graphs").facts["batches"]] == [1, 3]
    merged = load_case(case)
    assert merged.title == "mixtral on one box" and merged.workload.model == "mixtral-8x7b"
    assert merged.observations.probe.measured_bandwidth_gbs > 0
    assert case.read_text() != before


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    done = diagnoser("probe", "--only", "gpu")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "unknown probe" in done.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("workload: [\n")
    done = diagnoser("probe", "--only", "device", "--case", str(broken))
    assert done.returncode == 2 and "broken.yaml" in done.stderr and "Traceback" not in done.stderr
    assert broken.read_text() == "workload: [\n"
    done = diagnoser("probe", "--only", "device", "--option", "novalue")
    assert done.returncode == 2 and "KEY=VALUE" in done.stderr


def test_saved_report_merges_into_a_case_without_running_probes(tmp_path):
    saved = tmp_path / "report.json"
    saved.write_text(
        '{"schema_version": 1, "created": "t", "host": "gpu-box", "results": [{"name": "bandwidth", "status": "ok",'
        ' "duration_s": 2.0, "facts": {"measured_bandwidth_gbs": 4310.5, "theoretical_bandwidth_gbs": 4916.7}}]}'
    )
    case = tmp_path / "case.yaml"
    done = diagnoser("probe", "--from-report", str(saved), "--case", str(case))
    assert done.returncode == 0, done.stderr
    assert load_case(case).observations.probe.measured_bandwidth_gbs == 4310.5
    merged = case.read_bytes()
    saved.write_text('{"schema_version": 1, "created": "t", "host": "h", "results": [{"name": "x", "status": "odd"}]}')
    done = diagnoser("probe", "--from-report", str(saved), "--case", str(case))
    assert done.returncode == 2 and "report.json: results.0" in done.stderr
    assert case.read_bytes() == merged  # a bad report leaves the case as it was
