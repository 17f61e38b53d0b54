"""The probe framework: report model, memory guard, per-probe timeout, registry and case merge."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diagnoser.errors import InputError
from diagnoser.models.case import Case, load_case
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
from diagnoser.probes.report import ProbeReport, ProbeResult
from diagnoser.probes.to_case import merge_observations, merge_report, update_case_file


def test_report_round_trips_and_rejects_unknown_status():
    report = ProbeReport(
        created="2026-11-29T12:00:00+00:00",
        host="h",
        results=[ProbeResult(name="device", status="ok", duration_s=0.1, facts={"a": [1, 2]})],
    )
    again = ProbeReport.model_validate_json(report.model_dump_json())
    assert again == report and again.schema_version == 1
    assert again.result("device").facts == {"a": [1, 2]} and again.result("gemm") is None
    with pytest.raises(ValueError):
        ProbeResult(name="x", status="maybe", duration_s=0)


def test_report_module_imports_without_torch():
    code = "import sys, diagnoser.probes.report, diagnoser.probes.registry; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_bounded_bytes_caps_at_fraction_of_free_memory():
    ctx = ProbeContext(max_memory_fraction=0.1)
    free = host_available_bytes()
    assert abs(free - free_memory_bytes("cpu")) < free * 0.05
    assert bounded_bytes(ctx, 1024) == 1024
    huge = bounded_bytes(ctx, 10**15)
    # the guard grants about a tenth of what is free (free memory moves a little between reads)
    assert 0.08 * free < huge < 0.12 * free


def _ok(ctx):
    return {"device": ctx.device, "left": ctx.remaining_s() > 0}


def _skip(ctx):
    raise ProbeSkipped("needs a GPU")


def _boom(ctx):
    raise ValueError("bad\nshape")


def _hang(ctx):
    time.sleep(3)
    return {}


def _polite(ctx):
    while True:
        time.sleep(0.01)
        ctx.check_deadline()


def _not_json(ctx):
    return {"value": object()}


@pytest.mark.parametrize(
    "func, status, reason",
    [
        (_ok, "ok", None),
        (_skip, "skipped", "needs a GPU"),
        (_boom, "failed", "ValueError: bad shape"),
        (_hang, "failed", "timed out after 0.3 s"),
        (_polite, "failed", "deadline of 0.3 s reached"),
        (_not_json, "failed", "facts are not plain JSON"),
    ],
)
def test_run_probe_turns_every_outcome_into_a_status(func, status, reason):
    result = run_probe("p", func, ProbeContext(timeout_s=0.3, log=logging.getLogger("test")))
    assert result.status == status
    if reason is None:
        assert result.reason is None and result.facts == {"device": "cpu", "left": True}
    else:
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


def _bandwidth_report() -> ProbeReport:
    facts = {"measured_bandwidth_gbs": 21.5, "theoretical_bandwidth_gbs": None}
    return ProbeReport(
        created="t", host="h", results=[ProbeResult(name="bandwidth", status="ok", duration_s=1, facts=facts)]
    )


def test_update_case_file_writes_a_valid_case_and_keeps_existing_parts(tmp_path):
    path = tmp_path / "case.yaml"
    path.write_text("title: slow server\nobservations:\n  probe:\n    gpu_name: NVIDIA H200\n")
    update_case_file(path, _bandwidth_report())
    case = load_case(path)
    assert case.title == "slow server"
    assert case.observations.probe.gpu_name == "NVIDIA H200"
    assert case.observations.probe.measured_bandwidth_gbs == 21.5
    new = tmp_path / "new.json"
    update_case_file(new, _bandwidth_report())
    assert load_case(new).observations.probe.measured_bandwidth_gbs == 21.5
    assert merge_report(Case(), ProbeReport(created="t", host="h")).observations == Observations()


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
    report = ProbeReport.model_validate_json(out.stdout)
    assert [(r.status, r.reason) for r in report.results] == [
        ("skipped", "torch is not installed (pip install 'diagnoser[gpu]')")
    ] * 3
    assert report.torch_version is None
