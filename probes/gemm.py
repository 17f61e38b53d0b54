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
from collections.abc import Callable
from typing import Any, get_args

from pydantic import ValidationError

from diagnoser.errors import InputError
from diagnoser.models.hardware import Hardware, hardware_preset, match_hardware
from diagnoser.models.model_spec import resolve_model
from diagnoser.models.observations import GemmPoint
from diagnoser.models.probe_results import GemmFacts, GemmShapeSweep, GemmSkip, GemmSweepPoint, SweepDtype
from diagnoser.probes.bandwidth import cache_bytes
from diagnoser.probes.base import ProbeContext, ProbeSkipped, bounded_bytes
from diagnoser.probes.timing import median_s, require_device

DEFAULT_MODEL = "deepseek-v3"
M_VALUES = tuple(2**i for i in range(9))  # 1 .. 256 tokens per expert
CPU_MAX_DIM = 512  # keeps a CPU sweep to seconds; the shapes are scaled and marked as such
MAX_WEIGHT_COPIES = 16
CACHE_MULTIPLE = 4
SWEEP_DTYPES = get_args(SweepDtype)
IN_BYTES = {"fp32": 4, "bf16": 2, "fp8": 1}  # operands as stored
OUT_BYTES = {"fp32": 4, "bf16": 2, "fp8": 2}  # an fp8 GEMM writes bf16
FP8_MIN_CAPABILITY = (8, 9)  # Ada and Hopper are the first with fp8 tensor cores


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


def gemm_bytes(m: int, n: int, k: int, elem: float, out_elem: float | None = None) -> float:
    """Bytes a GEMM must move at least once: activations in, weights, output out (an fp8
    GEMM reads one-byte operands and writes bf16)."""
    return float((m * k + k * n) * elem + m * n * (elem if out_elem is None else out_elem))


def roofline_s(m: int, n: int, k: int, elem: float, peak_flops: float, peak_bw_gbs: float, out_elem: float | None = None) -> float:
    """The lower bound on time: the slower of the arithmetic and the memory traffic."""
    return max(gemm_flops(m, n, k) / peak_flops, gemm_bytes(m, n, k, elem, out_elem) / (peak_bw_gbs * 1e9))


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


def fp8_unsupported(device: str) -> str | None:
    """Why this machine cannot time an fp8 GEMM, or None when it can."""
    import torch

    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no fp8 matmul (torch._scaled_mm)"
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) < FP8_MIN_CAPABILITY:
            return f"compute capability {major}.{minor} has no fp8 tensor cores (needs 8.9 or newer)"
    return None


def sweep_dtypes(ctx: ProbeContext) -> tuple[list[str], dict[str, str]]:
    """The element types to sweep, and those asked for but not possible here, with why.

    A GPU sweeps bf16 and fp8 (MoE experts are often served in fp8, which halves the weight
    bytes a small-M GEMM is bound by); a CPU sweeps fp32 unless told otherwise (fp8 runs
    there too, slowly, which keeps that code path tested without a GPU)."""
    given = ctx.options.get("gemm_dtypes")
    wanted = [str(d) for d in given] if given else (["bf16", "fp8"] if ctx.device == "cuda" else ["fp32"])
    unknown = sorted(set(wanted) - set(SWEEP_DTYPES))
    if unknown:
        raise InputError(f"gemm: unknown dtype(s) {unknown} (known: {', '.join(SWEEP_DTYPES)})")
    skipped: dict[str, str] = {}
    if "fp8" in wanted and (why := fp8_unsupported(ctx.device)):
        skipped["fp8"] = why
    return [d for d in wanted if d not in skipped], skipped


def run(ctx: ProbeContext) -> GemmFacts:
    import torch

    require_device(ctx)
    shapes, source = resolve_shapes(ctx)
    scaled = ctx.device == "cpu" and not ctx.options.get("gemm_full_size_on_cpu")
    if scaled:
        shapes = [_scaled_for_cpu(s) for s in shapes]
    dtypes, dtypes_skipped = sweep_dtypes(ctx)
    if not dtypes:
        raise ProbeSkipped("; ".join(f"{d}: {why}" for d, why in dtypes_skipped.items()))
    device_name = torch.cuda.get_device_name() if ctx.device == "cuda" else None
    hw = hardware_for(ctx, device_name)
    peak_bw = (ctx.options.get("measured_bandwidth_gbs") or (hw.memory_bandwidth_gbs if hw else None)) if ctx.device == "cuda" else None
    m_values = [m for m in M_VALUES if m <= int(ctx.options.get("gemm_max_m", M_VALUES[-1]))]
    cache = cache_bytes(ctx.device) or 0
    table, skipped = [], []
    for dtype in dtypes:
        peak_flops = hw.peak_flops(dtype) if hw and ctx.device == "cuda" else None
        for shape in shapes:
            try:
                table.append(_sweep_shape(ctx, shape, m_values, dtype, cache, peak_flops, peak_bw))
            except ValidationError:
                raise  # a NaN or negative figure fails the probe; it is not a kernel the card refused
            except (RuntimeError, ValueError) as err:  # a kernel this torch or card refuses: say so, go on
                skipped.append(GemmSkip(name=shape["name"], dtype=dtype, reason=" ".join(str(err).split())[:300]))
    return GemmFacts(
        device=ctx.device,
        device_name=device_name,
        dtypes=dtypes,
        dtypes_skipped=dtypes_skipped,
        shapes_source=source,
        scaled_for_cpu=scaled,
        hardware=hw.name if hw else None,
        peak_tflops={d: hw.peak_flops(d) / 1e12 for d in dtypes} if hw and ctx.device == "cuda" else None,
        peak_bandwidth_gbs=peak_bw,
        m_values=m_values,
        shapes=table,
        skipped=skipped,
    )


def _matmul(dtype: str, x: Any, weights: list[Any]) -> Callable[[], Any]:
    """One call per weight copy in turn; fp8 goes through torch's scaled matmul with unit
    per-tensor scales (the kernel time of a block-scaled expert GEMM is close to it)."""
    import torch

    turn = iter(range(1 << 62))
    if dtype != "fp8":
        return lambda: torch.mm(x, weights[next(turn) % len(weights)])
    one = torch.ones((), device=x.device)
    return lambda: torch._scaled_mm(x, weights[next(turn) % len(weights)], scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def _operand(dtype: str, rows: int, cols: int, device: str) -> Any:
    """A random (rows, cols) operand; fp8 is drawn in float32 and cast, as fp8 has no randn."""
    import torch

    if dtype == "fp8":
        return torch.randn(rows, cols, device=device).to(torch.float8_e4m3fn)
    return torch.randn(rows, cols, dtype={"bf16": torch.bfloat16, "fp32": torch.float32}[dtype], device=device)


def _sweep_shape(
    ctx: ProbeContext,
    shape: dict[str, Any],
    m_values: list[int],
    dtype: str,
    cache: int,
    peak_flops: float | None,
    peak_bw: float | None,
) -> GemmShapeSweep:
    n, k = shape["n"], shape["k"]
    if dtype == "fp8" and (n % 16 or k % 16):
        raise ValueError(f"fp8 GEMMs need N and K divisible by 16, got {n}x{k}")
    elem, out_elem = IN_BYTES[dtype], OUT_BYTES[dtype]
    weight_bytes = n * k * elem
    copies = min(MAX_WEIGHT_COPIES, max(1, math.ceil(CACHE_MULTIPLE * cache / weight_bytes)))
    act_bytes = max(m_values) * (k * elem + n * out_elem)
    granted = bounded_bytes(ctx, copies * weight_bytes + act_bytes)
    copies = min(copies, (granted - act_bytes) // weight_bytes)
    if copies < 1:
        raise ProbeSkipped(f"memory guard leaves no room for one {n}x{k} weight")
    # (K, N) operands: fp8 wants the weight column-major, so it is made (N, K) and transposed
    weights = [_operand(dtype, n, k, ctx.device).t() if dtype == "fp8" else _operand(dtype, k, n, ctx.device) for _ in range(copies)]
    # A GPU call lasts microseconds, so each repeat cycles the copies several times.
    timing = {"repeats": 5, "inner": 4 * copies} if ctx.device == "cuda" else {"repeats": 3, "inner": copies}
    peaked = bool(peak_flops and peak_bw)
    points = []
    for m in m_values:
        seconds = median_s(ctx, _matmul(dtype, _operand(dtype, m, k, ctx.device), weights), warmup=2, **timing)
        achieved_gbs = gemm_bytes(m, n, k, elem, out_elem) / seconds / 1e9
        points.append(
            GemmSweepPoint(
                m=m,
                time_us=seconds * 1e6,
                tflops=gemm_flops(m, n, k) / seconds / 1e12,
                gbs=achieved_gbs,
                fraction_of_peak_flops=gemm_flops(m, n, k) / seconds / peak_flops if peaked else None,
                fraction_of_peak_bandwidth=achieved_gbs / peak_bw if peaked else None,
                fraction_of_roofline=roofline_s(m, n, k, elem, peak_flops, peak_bw, out_elem) / seconds if peaked else None,
            )
        )
    del weights
    return GemmShapeSweep(
        name=shape["name"], n=n, k=k, dtype=dtype, weight_copies=copies, points=points, m_doubling_time_at=doubling_m(points)
    )


def doubling_m(points: list[GemmSweepPoint]) -> int | None:
    """The first M whose time is twice that at the smallest M: below it, extra tokens were almost free."""
    base = points[0].time_us
    return next((p.m for p in points if p.time_us >= 2 * base), None)


def to_observations(facts: GemmFacts) -> dict[str, Any]:
    """The points whose bandwidth fraction is known (a GPU with a peak figure): the yardstick the
    rule base holds the served MoE kernel against at the same rows per expert."""
    points = [
        GemmPoint(shape=shape.name, dtype=shape.dtype, m=p.m, time_us=p.time_us, bw_fraction=p.fraction_of_peak_bandwidth)
        for shape in facts.shapes
        for p in shape.points
        if p.fraction_of_peak_bandwidth is not None
    ]
    return {"gemm_sweep": points} if points else {}
