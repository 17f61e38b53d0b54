"""Expert GEMMs at decode batch sizes: how far small per-expert batches sit below the roofline.

In MoE decode each expert sees only a few tokens (M rows), so its GEMM reads the whole weight
matrix to do a sliver of arithmetic; time stays near the weight-read floor until M is large.
The sweep times the workload's own expert shapes for M = 1, 2, 4 ... 256 and sets each point
against the peak FLOP/s and bandwidth, so the rule base can tell a slow kernel from a batch
that is simply too small. Weights rotate over enough copies to exceed the cache, so repeats
cannot be served from L2 and flatter the figure.
"""

from __future__ import annotations

import math
from typing import Any

from diagnoser.models.hardware import Hardware, hardware_preset, match_hardware
from diagnoser.models.model_spec import resolve_model
from diagnoser.probes.bandwidth import cache_bytes
from diagnoser.probes.base import ProbeContext, ProbeSkipped, bounded_bytes
from diagnoser.probes.timing import median_s, require_device

DEFAULT_MODEL = "deepseek-v3"
M_VALUES = tuple(2**i for i in range(9))  # 1 .. 256 tokens per expert
CPU_MAX_DIM = 512  # keeps a CPU sweep to seconds; the shapes are scaled and marked as such
MAX_WEIGHT_COPIES = 16
CACHE_MULTIPLE = 4


def expert_shapes(model: str | dict[str, Any], expert_tp: int = 1) -> list[dict[str, Any]]:
    """(N, K) of the expert projections one rank runs; dense MLP shapes for a model without MoE."""
    spec = resolve_model(model)
    hidden = spec.hidden_size
    width = spec.moe.expert_intermediate_size if spec.moe else spec.intermediate_size
    if width % expert_tp:
        raise ProbeSkipped(f"expert width {width} does not split over expert_tp={expert_tp}")
    local = width // expert_tp
    kind = "expert" if spec.moe else "dense mlp"
    return [
        {"name": f"{spec.name} {kind} gate_up", "n": 2 * local, "k": hidden},
        {"name": f"{spec.name} {kind} down", "n": hidden, "k": local},
    ]


def gemm_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def gemm_bytes(m: int, n: int, k: int, elem: int) -> float:
    """Bytes a GEMM must move at least once: activations in, weights, output out."""
    return float((m * k + k * n + m * n) * elem)


def roofline_s(m: int, n: int, k: int, elem: int, peak_flops: float, peak_bw_gbs: float) -> float:
    """The lower bound on time: the slower of the arithmetic and the memory traffic."""
    return max(gemm_flops(m, n, k) / peak_flops, gemm_bytes(m, n, k, elem) / (peak_bw_gbs * 1e9))


def hardware_for(ctx: ProbeContext, device_name: str | None) -> Hardware | None:
    """The preset named in the options, else the one whose name matches the device."""
    if ctx.options.get("hardware"):
        return hardware_preset(ctx.options["hardware"])
    return match_hardware(device_name)


def resolve_shapes(ctx: ProbeContext) -> tuple[list[dict[str, Any]], str]:
    given = ctx.options.get("gemm_shapes")
    if given:
        return [{"name": s.get("name", f"{s['n']}x{s['k']}"), "n": int(s["n"]), "k": int(s["k"])} for s in given], "option"
    model = ctx.options.get("model") or DEFAULT_MODEL
    source = "workload model" if ctx.options.get("model") else f"default model {DEFAULT_MODEL} (pass --model or --case)"
    return expert_shapes(model, int(ctx.options.get("expert_tp") or 1)), source


def _scaled_for_cpu(shape: dict[str, Any]) -> dict[str, Any]:
    return {**shape, "n": min(shape["n"], CPU_MAX_DIM), "k": min(shape["k"], CPU_MAX_DIM)}


def run(ctx: ProbeContext) -> dict[str, Any]:
    import torch

    require_device(ctx)
    shapes, source = resolve_shapes(ctx)
    scaled = ctx.device == "cpu" and not ctx.options.get("gemm_full_size_on_cpu")
    if scaled:
        shapes = [_scaled_for_cpu(s) for s in shapes]
    dtype = torch.bfloat16 if ctx.device == "cuda" else torch.float32
    elem = torch.finfo(dtype).bits // 8
    device_name = torch.cuda.get_device_name() if ctx.device == "cuda" else None
    hw = hardware_for(ctx, device_name)
    peak_flops = hw.peak_flops("bf16" if ctx.device == "cuda" else "fp32") if hw and ctx.device == "cuda" else None
    peak_bw = (ctx.options.get("measured_bandwidth_gbs") or (hw.memory_bandwidth_gbs if hw else None)) if ctx.device == "cuda" else None
    m_values = [m for m in M_VALUES if m <= int(ctx.options.get("gemm_max_m", M_VALUES[-1]))]
    cache = cache_bytes(ctx.device) or 0
    table = [_sweep_shape(ctx, shape, m_values, dtype, elem, cache, peak_flops, peak_bw) for shape in shapes]
    return {
        "device": ctx.device,
        "device_name": device_name,
        "dtype": str(dtype).removeprefix("torch."),
        "shapes_source": source,
        "scaled_for_cpu": scaled,
        "hardware": hw.name if hw else None,
        "peak_tflops": peak_flops / 1e12 if peak_flops else None,
        "peak_bandwidth_gbs": peak_bw,
        "m_values": m_values,
        "shapes": table,
    }


def _sweep_shape(
    ctx: ProbeContext,
    shape: dict[str, Any],
    m_values: list[int],
    dtype: Any,
    elem: int,
    cache: int,
    peak_flops: float | None,
    peak_bw: float | None,
) -> dict[str, Any]:
    import torch

    n, k = shape["n"], shape["k"]
    weight_bytes = n * k * elem
    copies = min(MAX_WEIGHT_COPIES, max(1, math.ceil(CACHE_MULTIPLE * cache / weight_bytes)))
    act_bytes = max(m_values) * (k + n) * elem
    granted = bounded_bytes(ctx, copies * weight_bytes + act_bytes)
    copies = min(copies, (granted - act_bytes) // weight_bytes)
    if copies < 1:
        raise ProbeSkipped(f"memory guard leaves no room for one {n}x{k} weight")
    weights = [torch.randn(k, n, dtype=dtype, device=ctx.device) for _ in range(copies)]
    # A GPU call lasts microseconds, so each repeat cycles the copies several times.
    timing = {"repeats": 5, "inner": 4 * copies} if ctx.device == "cuda" else {"repeats": 3, "inner": copies}
    points = []
    for m in m_values:
        x = torch.randn(m, k, dtype=dtype, device=ctx.device)
        turn = iter(range(1 << 62))
        seconds = median_s(ctx, lambda: torch.mm(x, weights[next(turn) % copies]), warmup=2, **timing)
        point: dict[str, Any] = {
            "m": m,
            "time_us": seconds * 1e6,
            "tflops": gemm_flops(m, n, k) / seconds / 1e12,
            "gbs": gemm_bytes(m, n, k, elem) / seconds / 1e9,
        }
        if peak_flops and peak_bw:
            point["fraction_of_peak_flops"] = gemm_flops(m, n, k) / seconds / peak_flops
            point["fraction_of_peak_bandwidth"] = point["gbs"] / peak_bw
            point["fraction_of_roofline"] = roofline_s(m, n, k, elem, peak_flops, peak_bw) / seconds
        points.append(point)
    del weights
    return {**shape, "weight_copies": copies, "points": points, "m_doubling_time_at": doubling_m(points)}


def doubling_m(points: list[dict[str, Any]]) -> int | None:
    """The first M whose time is twice that at the smallest M: below it, extra tokens were almost free."""
    base = points[0]["time_us"]
    return next((p["m"] for p in points if p["time_us"] >= 2 * base), None)


def to_observations(facts: dict[str, Any]) -> dict[str, Any]:
    """Nothing: the sweep is a reference table for this machine, not a fact about the served step."""
    return {}
