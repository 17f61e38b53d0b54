"""Readers of nvidia-smi, collect-env and SGLang benchmark files, on the real samples in tests/data/artifacts."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnoser.artifacts.artifact import Artifact
from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.readers import bench_sglang, collect_env, nvidia_smi
from diagnoser.readers.facts import apply_facts

DATA = Path(__file__).parent / "data" / "artifacts"
FORMATS = {
    "nvidia-smi-q": nvidia_smi.QUERY,
    "nvidia-smi-csv": nvidia_smi.QUERY_CSV,
    "nvidia-smi-topo": nvidia_smi.TOPOLOGY,
    "collect-env": collect_env.FORMAT,
    "sglang-bench-serving": bench_sglang.FORMAT,
}
SAMPLES = [p for name in FORMATS for p in sorted((DATA / name).iterdir()) if p.name != "README.md"]


def read(name: str, file: str) -> dict:
    facts = FORMATS[name].read(Artifact.load(DATA / name / file))
    apply_facts(Case(), facts)
    return {path: sourced.value for path, sourced in facts.facts.items()}


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_sample_is_its_format_only_and_makes_a_valid_case(path):
    artifact = Artifact.load(path)
    assert [n for n, f in FORMATS.items() if f.recognise(artifact)] == [path.parent.name]
    apply_facts(Case(), FORMATS[path.parent.name].read(artifact))


def test_plain_text_is_none_of_them(tmp_path):
    (tmp_path / "notes.txt").write_text("GPU0 was slow, NV18 everywhere, PyTorch version: who knows\n")
    assert not any(f.recognise(Artifact.load(tmp_path / "notes.txt")) for f in FORMATS.values())


def test_query_h100_under_load():
    facts = read("nvidia-smi-q", "h100-80gb-hbm3-gpu-burn.txt")
    assert facts["observations.probe.gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert facts["observations.probe.sm_clock_mhz"] == facts["observations.probe.max_sm_clock_mhz"] == 1980
    assert facts["observations.probe.mem_clock_mhz"] == facts["observations.probe.max_mem_clock_mhz"] == 2619
    assert facts["observations.probe.power_w"] == 629.45  # the GPU's average draw, not the memory's 85.83 W
    assert facts["observations.probe.power_limit_w"] == facts["observations.probe.default_power_limit_w"] == 700
    assert facts["observations.probe.temperature_c"] == 59
    assert facts["observations.probe.pcie_generation"] == 5
    assert facts["observations.probe.throttle_reasons"] == []
    assert facts["observations.probe.device_utilization"] == 1.0  # gpu-burn keeps a kernel running: 100 %, as a fraction


def test_query_l40s():
    facts = read("nvidia-smi-q", "l40s-gpu-burn.txt")
    assert (facts["observations.probe.gpu_name"], facts["observations.probe.sm_clock_mhz"]) == ("NVIDIA L40S", 2520)
    assert (facts["observations.probe.power_w"], facts["observations.probe.power_limit_w"]) == (110.24, 350)
    assert facts["observations.probe.pcie_generation"] == 4


def test_query_active_reasons_and_older_labels(tmp_path):
    text = (DATA / "nvidia-smi-q" / "h100-80gb-hbm3-gpu-burn.txt").read_text()
    text = text.replace("Clocks Event Reasons\n", "Clocks Throttle Reasons\n", 1)
    text = text.replace("SW Power Cap                                   : Not Active", "SW Power Cap                                   : Active")
    (tmp_path / "smi.txt").write_text(text)
    facts = nvidia_smi.QUERY.read(Artifact.load(tmp_path / "smi.txt"))
    assert facts.value("observations.probe.throttle_reasons") == ["SwPowerCap"]
    assert facts.facts["observations.probe.throttle_reasons"].source.startswith("smi.txt:")


def test_csv_with_units_and_without():
    h100 = read("nvidia-smi-csv", "h100-80gb-hbm3-gpu-burn.csv")
    assert h100["observations.probe.power_w"] == 631.95 and h100["observations.probe.power_limit_w"] == 700
    assert h100["observations.probe.default_power_limit_w"] == 700
    assert h100["observations.probe.sm_clock_mhz"] == 1980 and h100["observations.probe.pcie_generation"] == 5
    assert h100["observations.probe.throttle_reasons"] == []
    l40s = read("nvidia-smi-csv", "l40s-gpu-burn.csv")
    assert (l40s["observations.probe.gpu_name"], l40s["observations.probe.temperature_c"]) == ("NVIDIA L40S", 54)
    p100 = read("nvidia-smi-csv", "tesla-p100-pcie.csv")
    assert p100 == {
        "observations.probe.gpu_name": "Tesla P100-PCIE-16GB",
        "observations.probe.sm_clock_mhz": 405,
        "observations.probe.mem_clock_mhz": 715,
        "observations.probe.power_w": 28.16,
        "observations.probe.temperature_c": 37,
        "observations.probe.device_utilization": 0.0,  # an idle card: nvidia-smi's 0 %
    }


def test_csv_reasons_by_name_and_by_mask(tmp_path):
    (tmp_path / "q.csv").write_text(
        "name, clocks.sm [MHz], clocks_throttle_reasons.sw_power_cap, clocks_event_reasons.active\n"
        "NVIDIA A100-SXM4-80GB, 1410 MHz, Active, 0x0000000000000001\n"
        "NVIDIA A100-SXM4-80GB, 1100 MHz, Not Active, 0x0000000000000040\n"
    )
    facts = nvidia_smi.QUERY_CSV.read(Artifact.load(tmp_path / "q.csv"))
    assert facts.value("observations.probe.sm_clock_mhz") == 1410  # GPU 0's
    assert facts.value("observations.probe.throttle_reasons") == ["HwThermalSlowdown", "SwPowerCap"]  # any GPU's, idle left out


def test_topology():
    assert read("nvidia-smi-topo", "8-gpu-nv18-glm-5.2-box.txt") == {"observations.server.interconnect": "nvlink"}
    assert read("nvidia-smi-topo", "h100-80gb-hbm3-single-gpu.txt") == {}


def test_collect_env():
    gpu = read("collect-env", "vllm-0.16.0-2x-l40s.txt")
    assert gpu == {
        "observations.server.engine": "vllm",
        "observations.server.engine_version": "0.16.0",  # line 124 "vLLM Version : 0.16.0"
        "observations.platform.device_api": "cuda",
        "observations.platform.os": "Ubuntu 22.04.5 LTS (x86_64)",
        "observations.probe.gpu_name": "NVIDIA L40S",
        "observations.server.interconnect": "pcie",  # GPU0-GPU1 NODE in its GPU Topology section
    }
    cpu = read("collect-env", "vllm-0.32.0-cpu-here.txt")
    assert cpu == {
        "observations.server.engine": "vllm",
        "observations.server.engine_version": "0.32.0",  # line 88
        "observations.platform.device_api": "cpu",
        "observations.platform.os": "Debian GNU/Linux 12 (bookworm) (x86_64)",
    }


def test_sglang_newer_keys_leave_zero_figures_out():
    facts = read("sglang-bench-serving", "issue-12389-max-concurrency-16.json")
    assert "observations.metrics.ttft_ms" not in facts and "observations.metrics.itl_ms" not in facts
    assert facts["observations.metrics.tpot_ms"] == {"mean": 4.76496783658543, "p50": 4.830382395428731, "p99": 5.818627791791416}
    assert facts["observations.metrics.concurrency"] == 16
    assert facts["observations.metrics.requests_per_s"] == 3.267092590795978
    assert (facts["observations.metrics.input_tokens"], facts["observations.metrics.output_tokens"]) == (250000, 1000)
    assert facts["observations.metrics.boundary"] == "client_receipt"


def test_sglang_sweep_reads_the_last_run_and_says_so():
    artifact = Artifact.load(DATA / "sglang-bench-serving" / "h200-llama-3.3-70b-request-rate-sweep.jsonl")
    facts = bench_sglang.FORMAT.read(artifact)
    assert facts.value("observations.metrics.itl_ms") == {"p50": 17.667690059170127}
    assert facts.value("observations.metrics.output_tokens_per_s") == 1471.0864833760852
    assert facts.facts["observations.metrics.duration_s"].source.startswith(f"{artifact.name}:7 ")
    assert "holds 7 runs" in facts.missing[0]
    assert "observations.metrics.concurrency" not in facts  # max_concurrency null: not set


def _damaged(tmp_path, name: str, file: str, edit) -> str:
    target = tmp_path / file
    target.write_text(edit((DATA / name / file).read_text()))
    artifact = Artifact.load(target)
    assert FORMATS[name].recognise(artifact)
    with pytest.raises(InputError) as err:
        FORMATS[name].read(artifact)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_damaged_files_are_refused_in_one_line(tmp_path):
    q = _damaged(tmp_path, "nvidia-smi-q", "h100-80gb-hbm3-gpu-burn.txt", lambda t: t.replace("SM                                             : 1980 MHz", "SM                                             : abc MHz", 1))
    assert q.startswith("h100-80gb-hbm3-gpu-burn.txt:219: Clocks SM is \"abc MHz\"")
    assert "GPU section" in _damaged(tmp_path, "nvidia-smi-q", "l40s-gpu-burn.txt", lambda t: "\n".join(t.splitlines()[:8]))
    assert "not a number" in _damaged(tmp_path, "nvidia-smi-csv", "l40s-gpu-burn.csv", lambda t: t.replace("110.23 W", "lots W"))
    assert "without any GPU row" in _damaged(tmp_path, "nvidia-smi-csv", "tesla-p100-pcie.csv", lambda t: t.splitlines()[0])
    assert "values for" in _damaged(tmp_path, "nvidia-smi-csv", "tesla-p100-pcie.csv", lambda t: t.rsplit(",", 3)[0])
    assert "GPU rows" in _damaged(tmp_path, "nvidia-smi-topo", "8-gpu-nv18-glm-5.2-box.txt", lambda t: "\n".join(t.splitlines()[:5]))
    assert "not X, NV#" in _damaged(tmp_path, "nvidia-smi-topo", "8-gpu-nv18-glm-5.2-box.txt", lambda t: t.replace("NV18", "NVxx", 1))
    assert "PyTorch version" in _damaged(tmp_path, "collect-env", "vllm-0.32.0-cpu-here.txt", lambda t: "\n".join(t.splitlines()[:8]))
    assert "not a number" in _damaged(tmp_path, "sglang-bench-serving", "issue-12389-max-concurrency-16.json", lambda t: t.replace('"mean_tpot_ms": 4.76496783658543', '"mean_tpot_ms": "fast"'))
    assert "completed no request" in _damaged(tmp_path, "sglang-bench-serving", "issue-12389-max-concurrency-16.json", lambda t: t.replace('"completed": 300', '"completed": 0'))
