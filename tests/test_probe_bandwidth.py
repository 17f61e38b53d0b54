"""Bandwidth probe on host memory: the same code path a GPU takes, with honest byte counts."""

from __future__ import annotations

import pytest

from diagnoser.models.observations import Observations, ProbeFacts
from diagnoser.probes.bandwidth import buffer_bytes, gbs, host_cache_bytes, run, to_observations
from diagnoser.probes.base import ProbeContext, ProbeSkipped
from diagnoser.probes.to_case import merge_observations
from conftest import needs_torch
from probe_examples import UNDER_LOAD, bandwidth_facts

MIB = 1 << 20


def test_gbs_hand_worked():
    # a copy of a 1 GiB buffer moves 2 GiB; in 10 ms that is 2 * 1073741824 / 0.01 / 1e9
    assert gbs(2 * 1024 * MIB, 0.01) == pytest.approx(214.7483648)


def test_cache_size_read_from_sysfs(tmp_path):
    for index, size in enumerate(["48K", "2048K", "32M"]):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    assert host_cache_bytes(tmp_path) == 32 * MIB
    assert host_cache_bytes(tmp_path / "nothing") is None


def test_default_buffer_is_several_caches_and_guard_can_refuse():
    ctx = ProbeContext()
    assert buffer_bytes(ctx, 32 * MIB) == 256 * MIB  # 8 x 32 MiB, within a quarter of free memory here
    assert buffer_bytes(ctx, 1 * MIB) == 64 * MIB  # never below the CPU floor
    with pytest.raises(ProbeSkipped, match="memory guard"):
        buffer_bytes(ProbeContext(max_memory_fraction=1e-9), 32 * MIB)


@needs_torch
def test_cpu_run_measures_host_memory():
    ctx = ProbeContext(options={"bandwidth_buffer_bytes": 16 * MIB, "bandwidth_repeats": 3, "theoretical_bandwidth_gbs": 100.0})
    facts = run(ctx)
    assert facts.device == "cpu" and facts.buffer_bytes == 16 * MIB and facts.under_load is None
    assert 0.1 < facts.read_gbs < 2000 and 0.1 < facts.copy_gbs < 2000
    assert facts.measured_bandwidth_gbs == max(facts.read_gbs, facts.copy_gbs)
    assert facts.fraction_of_best_torch_copy == pytest.approx(facts.measured_bandwidth_gbs / facts.best_torch_copy_gbs)
    assert facts.fraction_of_theoretical == pytest.approx(facts.measured_bandwidth_gbs / 100.0)
    assert facts.best_torch_copy_variant.startswith("copy_")
    probe = to_observations(facts)["probe"]
    assert probe.measured_bandwidth_gbs == facts.measured_bandwidth_gbs and probe.theoretical_bandwidth_gbs == 100.0


@needs_torch
def test_without_a_theoretical_figure_the_fraction_is_absent_with_a_reason():
    facts = run(ProbeContext(options={"bandwidth_buffer_bytes": 8 * MIB, "bandwidth_repeats": 3}))
    assert facts.theoretical_bandwidth_gbs is None and facts.fraction_of_theoretical is None
    assert "host memory" in facts.theoretical_source
    # the device probe's theoretical figure must survive the merge
    with_device = Observations(probe=ProbeFacts(gpu_name="NVIDIA H200", theoretical_bandwidth_gbs=4916.7))
    merged = merge_observations(with_device, to_observations(facts))
    assert merged.probe.theoretical_bandwidth_gbs == 4916.7
    assert merged.probe.measured_bandwidth_gbs == facts.measured_bandwidth_gbs


def test_clocks_under_load_replace_idle_readings_in_the_case():
    facts = bandwidth_facts(gbs=4310.0, under_load=UNDER_LOAD)
    idle = Observations(probe=ProbeFacts(gpu_name="NVIDIA H200", sm_clock_mhz=345, throttle_reasons=["GpuIdle"]))
    merged = merge_observations(idle, to_observations(facts)).probe
    assert merged.sm_clock_mhz == 1980 and merged.throttle_reasons == [] and merged.gpu_name == "NVIDIA H200"
