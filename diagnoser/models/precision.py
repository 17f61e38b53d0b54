"""Storage formats and what one element really costs in memory traffic.

Block-scaled formats carry their scales with them, so the bytes per element include the
scale overhead: a bound that counts 0.5 bytes for NVFP4 undercounts traffic by 12.5%.
"""

from __future__ import annotations

from enum import Enum


class DType(str, Enum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    int4 = "int4"
    mxfp4 = "mxfp4"
    nvfp4 = "nvfp4"


# bytes per stored element, scales included
BYTES_PER_ELEMENT: dict[DType, float] = {
    DType.fp32: 4.0,
    DType.bf16: 2.0,
    DType.fp16: 2.0,
    DType.fp8: 1.0,  # per-tensor or 128x128 block scales: overhead < 0.01%
    DType.int8: 1.0,
    DType.int4: 0.5 + 2.0 / 128,  # group-128 quantisation with one fp16 scale per group
    DType.mxfp4: 0.5 + 1.0 / 32,  # one 8-bit shared exponent per 32 elements
    DType.nvfp4: 0.5 + 1.0 / 16,  # one fp8 scale per 16 elements
}

# The dtype whose tensor-core peak applies when weights of this storage format are multiplied.
COMPUTE_DTYPE: dict[DType, DType] = {
    DType.fp32: DType.fp32,
    DType.bf16: DType.bf16,
    DType.fp16: DType.bf16,
    DType.fp8: DType.fp8,
    DType.int8: DType.int8,
    DType.int4: DType.bf16,  # weight-only int4 kernels dequantise and multiply in bf16
    DType.mxfp4: DType.fp8,  # conservative: not every stack runs fp4 MMA
    DType.nvfp4: DType.fp8,
}


def bytes_per_element(dtype: DType) -> float:
    return BYTES_PER_ELEMENT[DType(dtype)]
