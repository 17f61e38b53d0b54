"""FLOPs and bytes of matrix-multiply ops from recorded input shapes, and roofline positions.

    matmul_cost(op_name, input_dims, input_types) -> (flops, bytes, dtype) | None
    roofline(flops, bytes, seconds, dtype, hardware) -> Roofline

With ``record_shapes`` the profiler writes each ATen op's input shapes; the kernels it
launched carry the op's "External id". That is enough to price GEMMs exactly (2·M·N·K FLOPs;
bytes = both operands and the result read/written once, the minimum traffic) and to say how
far a class of kernels sits from the compute roof or the memory roof. Bytes are a lower bound
(cache misses only add traffic), so the memory fraction is an upper bound on efficiency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from diagnoser.models.hardware import Hardware
from diagnoser.models.precision import BYTES_PER_ELEMENT, DType

_MAX_DIM = 2**40  # larger than any tensor dimension; past it a shape is corrupt, not a matmul to price
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear"})

_TYPES = {
    "float": DType.fp32,
    "c10::Half": DType.fp16,
    "c10::BFloat16": DType.bf16,
    "c10::Float8_e4m3fn": DType.fp8,
    "c10::Float8_e5m2": DType.fp8,
    "signed char": DType.int8,
}


def matmul_cost(name: str, dims: list, types: list) -> tuple[float, float, DType] | None:
    """FLOPs, minimum bytes and element type of one matmul-like op; None if shapes don't fit."""
    try:
        if name == "aten::linear":  # input [..., K], weight [N, K], optional bias
            x, w = dims[0], dims[1]
            m, k, n, batch = math.prod(x[:-1]), x[-1], w[0], 1
        elif name in ("aten::mm", "aten::addmm"):  # addmm(bias, a, b)
            a, b = (dims[1], dims[2]) if name == "aten::addmm" else (dims[0], dims[1])
            (m, k), n, batch = a, b[1], 1
        else:  # bmm(a, b) / baddbmm(c, a, b)
            a, b = (dims[1], dims[2]) if name == "aten::baddbmm" else (dims[0], dims[1])
            batch, m, k = a
            n = b[2]
        dtype = _TYPES.get(types[1] if name in ("aten::addmm", "aten::baddbmm") else types[0])
    except (IndexError, TypeError, ValueError):
        return None
    if dtype is None or not all(type(v) is int and 0 < v <= _MAX_DIM for v in (m, k, n, batch)):
        return None
    flops = 2.0 * batch * m * n * k
    elements = batch * (m * k + m * n) + (k * n if name == "aten::linear" else batch * k * n)
    return flops, elements * BYTES_PER_ELEMENT[dtype], dtype


@dataclass(frozen=True)
class Roofline:
    achieved_tflops: float
    achieved_tbs: float
    flops_fraction: float  # of the dtype's peak
    bw_fraction: float  # of the HBM peak
    bound: str  # "memory" or "compute": which roof the arithmetic intensity puts it under
    roof_fraction: float  # achieved FLOP/s over the roof at this intensity


def roofline(flops: float, nbytes: float, seconds: float, dtype: DType, hw: Hardware) -> Roofline:
    peak_flops = hw.peak_flops(dtype)
    peak_bw = hw.memory_bandwidth_gbs * 1e9
    intensity = flops / nbytes
    roof = min(peak_flops, intensity * peak_bw)
    achieved = flops / seconds
    return Roofline(
        achieved_tflops=achieved / 1e12,
        achieved_tbs=nbytes / seconds / 1e12,
        flops_fraction=achieved / peak_flops,
        bw_fraction=nbytes / seconds / peak_bw,
        bound="memory" if intensity * peak_bw < peak_flops else "compute",
        roof_fraction=achieved / roof,
    )
