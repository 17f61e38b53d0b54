"""`diagnoser probe` end to end, in a subprocess as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs_torch, run_cli
from probe_examples import GPU_BANDWIDTH, H200_DEVICE, bandwidth_facts, report_of, save

from diagnoser.models.case import load_case
from diagnoser.models.probe_report import ProbeReport
from diagnoser.models.probe_results import probe_result

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
    assert status["device"].status == "ok" and status["device"].facts.nvml.startswith("no NVIDIA driver")
    assert status["bandwidth"].status == "ok" and status["bandwidth"].facts.device == "cpu"
    assert status["bandwidth"].facts.measured_bandwidth_gbs > 0
    assert status["graphs"].facts.mode == "eager only" and status["graphs"].facts.graph_skipped_reason
    for name in ("client", "context_sweep"):
        assert status[name].status in {"skipped", "failed"} and status[name].reason and status[name].facts is None


@needs_torch
def test_case_is_read_for_shapes_and_merged_beside_it(tmp_path):
    case = tmp_path / "case.yaml"
    case.write_text(
        "title: mixtral on one box\nworkload:\n  model: mixtral-8x7b\n  hardware: h200\n  batch: 6\n  layout: {tp: 2, dp: 2}\n"
    )
    before = case.read_bytes()
    done = diagnoser(
        "probe", "--json", "--only", "bandwidth,gemm,graphs", "--case", str(case),
        "--option", "bandwidth_buffer_bytes=8388608", "--option", "gemm_max_m=2", "--option", "graph_layers=1",
    )
    assert done.returncode == 0, done.stderr
    report = ProbeReport.model_validate_json(done.stdout)
    gemm = report.result("gemm")
    assert gemm.facts.shapes_source == "workload model"
    # Mixtral experts are 14336 wide; TP 2 with EP 1 shards each expert in two (scaled to 512 on a CPU)
    assert gemm.facts.shapes[0].name.startswith("mixtral-8x7b expert")
    # batch 6 over dp 2: each attention rank decodes 3 sequences
    assert [p.batch for p in report.result("graphs").facts.batches] == [1, 3]
    merged = load_case(tmp_path / "case.probed.yaml")
    assert merged.title == "mixtral on one box" and merged.workload.model == "mixtral-8x7b"
    assert merged.observations.probe.measured_bandwidth_gbs > 0
    assert case.read_bytes() == before


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


CASE_TEXT = "# the engineer's notes survive\ntitle: slow server   # aligned comment\nobservations:\n  probe: {gpu_name: NVIDIA H200}\n"


def one_line_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert all(needle in lines[0] for needle in needles), lines[0]
    return lines[0]


@pytest.mark.parametrize("through_symlink", [False, True])
def test_the_named_case_is_read_never_rewritten_and_the_merge_goes_beside_it(tmp_path, through_symlink):
    saved = save(report_of(device=H200_DEVICE, bandwidth=bandwidth_facts("cuda", 4310.5)), tmp_path / "report.json")
    real = tmp_path / "real.yaml"
    real.write_text(CASE_TEXT)
    real.chmod(0o640)
    case = tmp_path / "case.yaml"
    if through_symlink:
        case.symlink_to(real)
    else:
        case = real
    done = run_cli("probe", "--probe-report", str(saved), "--case", str(case))
    assert done.returncode == 0, done.stderr
    assert real.read_text() == CASE_TEXT and oct(real.stat().st_mode & 0o777) == "0o640"
    assert case.is_symlink() == through_symlink
    merged = case.with_name(f"{case.stem}.probed.yaml")
    assert done.stderr.strip() == f"diagnoser: merged the probe results into {merged} ({case} unchanged)"
    probe = load_case(merged).observations.probe
    assert (probe.gpu_name, probe.measured_bandwidth_gbs, probe.sm_clock_mhz) == ("NVIDIA H200", 4310.5, 345)


def test_case_out_names_the_merge_and_nothing_measured_writes_nothing(tmp_path):
    saved = save(report_of(bandwidth=GPU_BANDWIDTH), tmp_path / "report.json")
    case = tmp_path / "case.yaml"
    case.write_text(CASE_TEXT)
    out = tmp_path / "merged" / "case.json"
    done = run_cli("probe", "--probe-report", str(saved), "--case", str(case), "--case-out", str(out))
    assert done.returncode == 0, done.stderr
    assert load_case(out).observations.probe.measured_bandwidth_gbs == 4400.0
    skipped = ProbeReport(created="t", host="h", results=[probe_result(name="gemm", status="skipped", reason="no GPU", duration_s=0)])
    nothing = save(skipped, tmp_path / "skipped.json")
    done = run_cli("probe", "--probe-report", str(nothing), "--case", str(case))
    assert done.returncode == 0, done.stderr
    assert "no successful probe measured anything a case holds" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case.yaml", "merged", "report.json", "skipped.json"]
    assert case.read_text() == CASE_TEXT


def test_an_output_that_is_an_input_is_refused_before_any_probe_runs(tmp_path):
    case = tmp_path / "case.yaml"
    case.write_text(CASE_TEXT)
    # all probes would take a while; the refusal comes first, so nothing is measured
    one_line_error(run_cli("probe", "-o", str(case), "--case", str(case)), f"-o {case}: is an input of this command")
    one_line_error(run_cli("probe", "--case", str(case), "--case-out", str(case)), "--case-out", "is an input")
    saved = save(report_of(bandwidth=GPU_BANDWIDTH), tmp_path / "report.json")
    one_line_error(run_cli("probe", "--probe-report", str(saved), "-o", str(saved)), "-o", "is an input")
    one_line_error(run_cli("probe", "--case-out", str(tmp_path / "x.yaml")), "--case-out: give --case too")
    assert case.read_text() == CASE_TEXT and sorted(p.name for p in tmp_path.iterdir()) == ["case.yaml", "report.json"]


def test_a_bad_saved_report_is_refused_in_one_line_naming_file_and_field(tmp_path):
    saved = tmp_path / "report.json"
    good = json.loads(report_of(bandwidth=GPU_BANDWIDTH).model_dump_json())
    figure = "results.0.bandwidth.facts.read_gbs"
    for value, problem in (("4400", "Input should be a valid number"), (-1.0, "Input should be greater than or equal to 0")):
        good["results"][0]["facts"]["read_gbs"] = value
        saved.write_text(json.dumps(good))
        one_line_error(run_cli("probe", "--probe-report", str(saved)), f"{saved}: {figure}: {problem}")
    del good["results"][0]["facts"]["read_gbs"]
    saved.write_text(json.dumps(good).replace('"copy_gbs": ', '"read_gbs": NaN, "copy_gbs": '))
    one_line_error(run_cli("probe", "--probe-report", str(saved)), f"{saved}: NaN is not a finite number")
    saved.write_text(json.dumps(good))
    one_line_error(run_cli("probe", "--probe-report", str(saved), "--case", str(tmp_path / "c.yaml")), f"{figure}: Field required")
    saved.write_text(json.dumps({**good, "schema_version": 1}))
    one_line_error(run_cli("probe", "--probe-report", str(saved)), "schema_version 1 not supported (this diagnoser reads 2")
    one_line_error(run_cli("probe", "--probe-report", "/dev/zero"), "/dev/zero: larger than", "too big for a probe report")
    assert not (tmp_path / "c.yaml").exists()


def test_a_number_in_exponent_form_is_a_number(tmp_path):
    text = report_of(bandwidth=GPU_BANDWIDTH).model_dump_json(indent=2).replace('"read_gbs": 4400.0', '"read_gbs": 2.64e1')
    assert "2.64e1" in text
    saved = tmp_path / "report.json"
    saved.write_text(text)
    done = run_cli("probe", "--probe-report", str(saved))
    assert done.returncode == 0, done.stderr
    assert "read 26.4 GB/s" in done.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--delay-ms", "nan"), "--delay-ms: expected a finite number >= 0, got 'nan'"),
        (("--timeout", "inf"), "--timeout: expected a finite number in 1..86400, got 'inf'"),
        (("--timeout", "1e308"), "--timeout: expected a finite number in 1..86400, got '1e308'"),
        (("--max-memory-fraction", "nan"), "--max-memory-fraction: expected a finite number in 0.01..0.9"),
        (("--expert-tp", "-2"), "--expert-tp: expected an integer >= 1, got '-2'"),
        (("--option", "delay_ms=.nan"), "--option delay_ms: nan is not a finite, non-negative number"),
        (("--option", "batch_sizes=[1, -8]"), "--option batch_sizes: -8 is not a finite, non-negative number"),
    ],
)
def test_numeric_flags_refuse_nan_infinity_and_negatives(args, needle):
    one_line_error(run_cli("probe", "--only", "device", *args), needle)


def test_schema_documents_every_figure_of_every_probe():
    schema = json.loads(run_cli("schema", "probe").stdout)
    union = schema["properties"]["results"]["items"]
    assert union["discriminator"]["propertyName"] == "name"
    assert sorted(union["discriminator"]["mapping"]) == sorted(
        ["device", "bandwidth", "gemm", "graphs", "collectives", "client", "context_sweep"]
    )
    defs = schema["$defs"]
    for result in union["discriminator"]["mapping"].values():
        assert defs[result.split("/")[-1]]["properties"]["facts"]["anyOf"][0]["$ref"].endswith("Facts")
    undocumented = [(name, figure) for name, model in defs.items() for figure, spec in model["properties"].items() if not spec.get("description")]
    assert undocumented == []
    assert defs["GemmSweepPoint"]["properties"]["time_us"]["description"] == "median time of one GEMM, µs"
    assert defs["GemmSweepPoint"]["properties"]["time_us"]["minimum"] == 0
    assert "GB/s" in defs["BandwidthFacts"]["properties"]["measured_bandwidth_gbs"]["description"]
