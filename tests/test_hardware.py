"""Hardware presets: datasheet figures and matching the names drivers report."""

from __future__ import annotations

import pytest

from diagnoser.models.hardware import hardware_preset, hardware_presets, match_hardware


@pytest.mark.parametrize(
    ("reported", "preset"),
    [
        # as torch.cuda.get_device_name / nvmlDeviceGetName / a trace's deviceProperties say them
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
        ("NVIDIA B200", "b200"),
        ("AMD Instinct MI300X", "mi300x"),
    ],
)
def test_reported_names_get_their_own_variant(reported, preset):
    assert match_hardware(reported) is hardware_presets()[preset]


@pytest.mark.parametrize("reported", [None, "", "Some NPU", "NVIDIA GH200 480GB", "NVIDIA A100-PCIE-40GB", "NVIDIA H100"])
def test_unknown_or_ambiguous_names_get_no_preset(reported):
    # a guess would put the wrong bandwidth under every bound (PCIe H100: 2.0 TB/s, SXM: 3.35)
    assert match_hardware(reported) is None


def test_variants_differ_where_the_datasheets_do():
    sxm, pcie, nvl = (hardware_preset(k) for k in ("h100-sxm", "h100-pcie", "h100-nvl"))
    assert (sxm.memory_bandwidth_gbs, pcie.memory_bandwidth_gbs, nvl.memory_bandwidth_gbs) == (3350, 2000, 3900)
    assert pcie.sm_count == 114 and pcie.peak_flops("bf16") == pytest.approx(756e12)
    assert hardware_preset("h200-nvl").peak_flops("fp8") < hardware_preset("h200").peak_flops("fp8")
    assert hardware_preset("a100-40gb").peak_flops("fp8") == hardware_preset("a100-40gb").peak_flops("bf16")  # no fp8 units


def test_every_preset_can_be_matched_by_a_name_of_its_own():
    for key, hw in hardware_presets().items():
        assert hw.device_names, key
        assert match_hardware(" ".join(hw.device_names[0])) is hw, key
