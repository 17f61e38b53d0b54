"""The probe framework: report model, memory guard, per-probe timeout, registry and case merge."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
import typing
from pathlib import Path

import pytest

from diagnoser.errors import InputError
from diagnoser.models.case import load_case
from diagnoser.models.observations import GraphReplayObs, Observations, ProbeFacts
from diagnoser.probes import registry
from diagnoser.probes.base import (
    ProbeContext,
    ProbeSkipped,
    bounded_bytes,
    free_memory_bytes,
    host_available_bytes,
    run_probe,
)
from diagnoser.models.probe_report import ProbeReport
from diagnoser.models.probe_results import BandwidthFacts, DeviceFacts, GemmFacts, NvmlFacts, ProbeResult, probe_result
from diagnoser.probes.to_case import merge_observations, merged_case, write_case
from probe_examples import GPU_BANDWIDTH, GPU_GEMM, bandwidth_facts, report_of


def test_report_round_trips_and_rejects_unknown_status_or_probe():
    report = report_of(bandwidth=GPU_BANDWIDTH)
    again = ProbeReport.model_validate_json(report.model_dump_json())
    assert again == report and again.schema_version == 2
    assert again.result("bandwidth").facts == GPU_BANDWIDTH and again.result("gemm") is None
    with pytest.raises(ValueError, match="status"):
        probe_result(name="device", status="maybe", reason="x", duration_s=0)
    with pytest.raises(ValueError, match="does not match any of the expected tags"):
        probe_result(name="x", status="skipped", reason="x", duration_s=0)


def test_facts_are_exactly_the_ok_results():
    """A skipped or failed probe measured nothing it vouches for: it carries no facts, and says why."""
    with pytest.raises(ValueError, match="an ok result carries its facts"):
        probe_result(name="bandwidth", status="ok", duration_s=1)
    with pytest.raises(ValueError, match="a failed result carries no facts"):
        probe_result(name="bandwidth", status="failed", reason="half done", duration_s=1, facts=GPU_BANDWIDTH)
    with pytest.raises(ValueError, match="says why in reason"):
        probe_result(name="gemm", status="skipped", duration_s=1)
    with pytest.raises(ValueError, match="valid dictionary or instance of GemmFacts"):
        probe_result(name="gemm", status="ok", duration_s=1, facts=GPU_BANDWIDTH)
    report = ProbeReport(created="t", host="h", results=[probe_result(name="gemm", status="skipped", reason="no GPU", duration_s=0)])
    assert report.ok_facts("gemm") is None and report.ok_facts("device") is None


def test_every_probe_in_the_registry_has_a_typed_result():
    tags = [typing.get_args(member.model_fields["name"].annotation)[0] for member in typing.get_args(typing.get_args(ProbeResult)[0])]
    assert tags == list(registry.PROBES)


def test_every_figure_is_finite_and_sizes_and_times_are_not_negative():
    with pytest.raises(ValueError, match="finite number"):
        bandwidth_facts(gbs=float("nan"))
    with pytest.raises(ValueError, match="greater than 0"):
        bandwidth_facts(gbs=-1.0)
    with pytest.raises(ValueError, match="valid number"):
        BandwidthFacts.model_validate({**GPU_BANDWIDTH.model_dump(), "read_gbs": "4400"})
    with pytest.raises(ValueError, match="Field required"):
        GemmFacts.model_validate({k: v for k, v in GPU_GEMM.model_dump().items() if k != "m_values"})
    assert NvmlFacts.unavailable("no driver").missing == dict.fromkeys(("driver_version", "cuda_driver_version", "device_count"), "no driver")


def test_report_module_imports_without_torch_or_probe_code():
    code = (
        "import sys, diagnoser.models.probe_report, diagnoser.report.probe\n"
        "print('torch' in sys.modules, any(m.startswith('diagnoser.probes') for m in sys.modules))\n"
        "import diagnoser.probes.registry\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False"]


def test_bounded_bytes_caps_at_fraction_of_free_memory():
    ctx = ProbeContext(max_memory_fraction=0.1)
    free = host_available_bytes()
    assert abs(free - free_memory_bytes("cpu")) < free * 0.05
    assert bounded_bytes(ctx, 1024) == 1024
    huge = bounded_bytes(ctx, 10**15)
    # the guard grants about a tenth of what is free (free memory moves a little between reads)
    assert 0.08 * free < huge < 0.12 * free


def _ok(ctx):
    assert ctx.remaining_s() > 0
    return DeviceFacts(**dict(NvmlFacts.unavailable(ctx.device)), torch_cuda="not available")


def _skip(ctx):
    raise ProbeSkipped("needs a GPU")


def _boom(ctx):
    raise ValueError("bad\nshape")


def _hang(ctx):
    time.sleep(3)


def _polite(ctx):
    while True:
        time.sleep(0.01)
        ctx.check_deadline()


def _nan(ctx):
    return bandwidth_facts(gbs=float("nan"))


def _wrong_facts(ctx):
    return GPU_BANDWIDTH


@pytest.mark.parametrize(
    "func, status, reason",
    [
        (_ok, "ok", None),
        (_skip, "skipped", "needs a GPU"),
        (_boom, "failed", "ValueError: bad shape"),
        (_hang, "failed", "timed out after 0.3 s"),
        (_polite, "failed", "deadline of 0.3 s reached"),
        (_nan, "failed", "device measured an invalid figure: read_gbs: Input should be a finite number"),
        (_wrong_facts, "failed", "device measured an invalid figure: device.facts: Input should be a valid dictionary or instance of DeviceFacts"),
    ],
)
def test_run_probe_turns_every_outcome_into_a_status(func, status, reason):
    """The device probe's slot, filled with stand-ins; NaN from a probe fails it with the field named."""
    result = run_probe("device", func, ProbeContext(timeout_s=0.3, log=logging.getLogger("test")))
    assert result.status == status
    if reason is None:
        assert result.reason is None and result.facts.nvml == "cpu"
    else:
        assert result.facts is None
        assert result.reason.startswith(reason) and "\n" not in result.reason
    assert result.duration_s < 1.5


def test_registry_order_selection_and_missing_module(monkeypatch):
    assert list(registry.PROBES) == ["device", "bandwidth", "gemm", "graphs", "collectives", "client", "context_sweep"]
    assert registry.select(["graphs", "device"]) == ["device", "graphs"]
    with pytest.raises(InputError, match="unknown probe"):
        registry.select(["gpu"])
    with pytest.raises(InputError, match="at least one"):
        registry.select([" ", ""])
    monkeypatch.setitem(registry.PROBES, "device", "diagnoser.probes.no_such_module:run")
    report = registry.run_probes(ProbeContext(), ["device"])
    (result,) = report.results
    assert result.status == "failed" and "cannot load probe" in result.reason and "no_such_module" in result.reason


def test_merge_updates_models_field_by_field_and_keeps_a_known_graph_status():
    obs = Observations(probe=ProbeFacts(gpu_name="NVIDIA H200"), graph=GraphReplayObs(status="none"))
    merged = merge_observations(
        obs,
        {"probe": ProbeFacts(measured_bandwidth_gbs=4300.0), "graph": GraphReplayObs(launch_cost_us=4.5)},
    )
    assert merged.probe.gpu_name == "NVIDIA H200" and merged.probe.measured_bandwidth_gbs == 4300.0
    assert merged.graph.status.value == "none" and merged.graph.launch_cost_us == 4.5
    fresh = merge_observations(Observations(), {"graph": GraphReplayObs(launch_cost_us=4.5)})
    assert fresh.graph.status is None and fresh.graph.launch_cost_us == 4.5


def test_merged_case_keeps_existing_parts_and_is_written_as_yaml_or_json(tmp_path):
    path = tmp_path / "case.yaml"
    path.write_text("title: slow server\nobservations:\n  probe:\n    gpu_name: NVIDIA H200\n")
    report = report_of(bandwidth=bandwidth_facts("cpu", 21.5))
    case = merged_case(path, report)
    assert case.title == "slow server"
    assert case.observations.probe.gpu_name == "NVIDIA H200"
    assert case.observations.probe.measured_bandwidth_gbs == 21.5
    for out in (tmp_path / "out.yaml", tmp_path / "out.json"):
        write_case(out, case)
        assert load_case(out) == case
    assert merged_case(tmp_path / "none.yaml", report).title == "probed"
    # nothing a case holds: a report with no successful probe, or only figures a case has no place for
    assert merged_case(path, ProbeReport(created="t", host="h")) is None
    assert merged_case(path, report_of(device=DeviceFacts(**dict(NvmlFacts.unavailable("no driver")), torch_cuda="n/a"))) is None


def test_probes_only_read_device_state():
    """Safety: no NVML setter, reset or nvidia-smi reconfiguration anywhere in the probes."""
    probes_dir = Path(__file__).resolve().parents[1] / "probes"
    forbidden = re.compile(r"nvmlDevice(Set|Reset|Clear)|nvmlGpuInstance|nvidia-smi\s+.*-(lgc|lmc|pl|pm|c|mig|rgc|ac|rac)\b")
    sources = sorted(probes_dir.glob("*.py"))
    assert len(sources) >= 8
    offenders = [f"{p.name}: {m.group(0)}" for p in sources for m in forbidden.finditer(p.read_text())]
    assert offenders == []


def test_without_the_gpu_extra_torch_probes_skip_with_the_install_hint():
    # None in sys.modules makes `import torch` fail exactly as on a machine without the extra
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\nsys.modules['pynvml'] = None\n"
        "from diagnoser.cli import main\n"
        "sys.exit(main(['probe', '--json', '--only', 'bandwidth,gemm,graphs']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = ProbeReport.model_validate_json(out.stdout)  # skipped: no facts
    assert [(r.status, r.reason) for r in report.results] == [
        ("skipped", "torch is not installed (pip install 'diagnoser[gpu]')")
    ] * 3
    assert report.torch_version is None
