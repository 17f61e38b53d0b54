"""Kernel classes on real kernel names: a vLLM A100 capture and names from other stacks."""

from __future__ import annotations

import csv
from collections import defaultdict

import pytest

from diagnoser.trace.classes import class_table, classify

VLLM_A100 = "data/nsys/nsys-llm-explainer/a100_vllm/tables/kernels.csv"


@pytest.fixture
def vllm_kernels(shared_dir):
    with open(shared_dir / VLLM_A100, newline="") as handle:
        return list(csv.DictReader(handle))


def test_vllm_a100_decode_kernels_by_class(vllm_kernels):
    """Shares of kernel time per class on vLLM 0.15 (fp16, one A100), summed by hand from the
    table's pct_total_kernel_time column (its 30 rows hold 95.9 % of kernel time): GEMMs
    (cuBLAS ampere_*, cutlass, sm80_xmma, splitKreduce; 16 rows) 56.0 %, fills 8.48 + 1.43 +
    1.09 = 11.0 % plus Inductor pointwise 2.97 + 2.78 = 5.75 %, attention (reshape_and_cache,
    unified attention 2d and 3d) 6.05 + 3.58 + 2.37 = 12.0 %, Inductor RMS norms 2.73 + 2.44 =
    5.17 %, the radix-sort sampler 1.38 + 0.87 = 2.25 %."""
    shares: dict[str, float] = defaultdict(float)
    for row in vllm_kernels:
        shares[classify(row["kernel_name"]).name] += float(row["pct_total_kernel_time"])
    assert shares["gemm"] == pytest.approx(56.0, abs=0.05)
    assert shares["elementwise"] == pytest.approx(11.0 + 5.75, abs=0.05)
    assert shares["attention"] == pytest.approx(12.0, abs=0.05)
    assert shares["norm"] == pytest.approx(5.17, abs=0.05)
    assert shares["sampling"] == pytest.approx(2.25, abs=0.05)
    assert shares["triton"] == pytest.approx(2.27, abs=0.05)  # one Inductor reduction with no telling op name
    assert shares["other"] == pytest.approx(1.43, abs=0.05)  # reduce_segments


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_2", "norm"),
        ("triton_poi_fused_mul_silu_slice_1", "elementwise"),
        ("triton_red_fused_3", "triton"),
        ("fused_moe_kernel", "moe"),  # a Triton kernel, but MoE first
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)", "communication"),
        ("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t>>(Flash_fwd_params)", "attention"),
        ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "gemm"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::Half>, std::array<char*, 1ul>>(int, T2, T3)", "elementwise"),
        ("void at_cuda_detail::cub::DeviceSegmentedRadixSortKernel<at_cuda_detail::cub::DeviceRadixSortPolicy<float, long, int>::Policy900, true, false, float, long, int>(float const*, float*)", "sampling"),
    ],
)
def test_real_names_from_serving_stacks(name, expected):
    assert classify(name).name == expected


def test_table_version_moves_with_meaning():
    # version 2: Inductor norms and pointwise kernels leave the catch-all "triton" class
    assert class_table().version == 3
