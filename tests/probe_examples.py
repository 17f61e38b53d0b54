"""GPU-shaped probe facts, written by hand where only a GPU (or a real server) could make them.

Every figure is present, as the typed facts require; the values are those of an H200 run
and are what the rendering and case-merge tests check against.
"""

from __future__ import annotations

from pathlib import Path

from diagnoser.models.probe_report import ProbeReport
from diagnoser.models.probe_results import (
    BandwidthFacts,
    BandwidthTiming,
    CollectivesFacts,
    CollectiveSummary,
    ContextSweepFacts,
    DeviceFacts,
    GpuDevice,
    NvLinkState,
    ContextSweepPoint,
    Facts,
    GemmFacts,
    GemmShapeSweep,
    GemmSkip,
    GemmSweepPoint,
    GraphBatch,
    GraphsFacts,
    InjectedDelay,
    LiveReadings,
    probe_result,
)

H200_L2_BYTES = 62_914_560


def report_of(**facts: Facts) -> ProbeReport:
    """A report in which each named probe succeeded with the given facts."""
    return ProbeReport(
        created="2026-11-29T12:00:00+00:00",
        host="gpu-box",
        results=[probe_result(name=name, status="ok", duration_s=1.0, facts=f) for name, f in facts.items()],
    )


def save(report: ProbeReport, path: Path) -> Path:
    path.write_text(report.model_dump_json(indent=2))
    return path


def bandwidth_facts(device: str = "cuda", gbs: float = 4400.0, under_load: LiveReadings | None = None) -> BandwidthFacts:
    """A bandwidth run whose figure is ``gbs``: on a GPU against the H200's 4916.7 GB/s, on a CPU without one."""
    on_gpu = device == "cuda"
    buffer = (1 << 30) if on_gpu else (256 << 20)
    cache = H200_L2_BYTES if on_gpu else 32 << 20
    theory = 4916.736 if on_gpu else None
    return BandwidthFacts(
        device=device,
        buffer_bytes=buffer,
        cache_bytes=cache,
        buffer_over_cache=buffer / cache,
        dtype="float32",
        timing=BandwidthTiming(repeats=7, warmup=2, inner=3 if on_gpu else 1),
        read_gbs=gbs,
        copy_gbs=gbs * 4250 / 4400,
        copy_bytes_counted="read + write (2 x buffer)",
        measured_bandwidth_gbs=gbs,
        best_torch_copy_gbs=gbs * 4300 / 4400,
        best_torch_copy_variant="copy_ 1/2 buffer",
        fraction_of_best_torch_copy=4400 / 4300,
        theoretical_bandwidth_gbs=theory,
        theoretical_source="nvml" if on_gpu else "no theoretical figure for host memory (pass theoretical_bandwidth_gbs)",
        fraction_of_theoretical=gbs / theory if theory else None,
        under_load=under_load,
    )


H200_DEVICE = DeviceFacts(
    nvml="ok", driver_version="570.86.15", cuda_driver_version="12.8", device_count=1, missing={}, torch_cuda="12.8",
    devices=[
        GpuDevice(
            index=0, name="NVIDIA H200", uuid="GPU-5a3e0c2d-11aa-4b2c-9d7e-0123456789ab", memory_total_bytes=150_754_820_096,
            memory_free_bytes=150_000_000_000, memory_bus_width_bits=6144, max_mem_clock_mhz=3201,
            theoretical_bandwidth_gbs=4916.736, max_sm_clock_mhz=1980, sm_clock_mhz=345, mem_clock_mhz=3201,
            clock_event_reasons=["GpuIdle"], power_w=113.25, power_limit_w=700.0, temperature_c=36, pcie_generation=5,
            pcie_width=16, pcie_max_generation=5, nvlink=NvLinkState(active_links=18, links_checked=18), mig_enabled=None,
            torch_index=0, sm_count=132, l2_cache_bytes=H200_L2_BYTES, missing={"mig_mode": "NVML NotSupported"},
        )
    ],
)  # fmt: skip

UNDER_LOAD = LiveReadings(sm_clock_mhz=1980, mem_clock_mhz=3201, clock_event_reasons=[], power_w=512.0, missing={})
GPU_BANDWIDTH = bandwidth_facts(under_load=UNDER_LOAD)

GPU_GRAPHS = GraphsFacts(
    device="cuda", layers=32, hidden=512, dtype="float32", mode="eager and CUDA graph", graph_skipped_reason=None,
    batches=[
        GraphBatch(
            batch=1, eager_step_ms=2.0, launches_per_step=320, launches_counted_as="torch operations per step",
            eager_us_per_launch=6.25, captured=True, capture_error=None, replay_matches_eager=True, graph_step_ms=0.5,
            graph_gain=4.0, launch_cost_us=4.6875,
        ),
        GraphBatch(
            batch=256, eager_step_ms=2.5, launches_per_step=320, launches_counted_as="torch operations per step",
            eager_us_per_launch=7.8125, captured=False, capture_error="out of memory", replay_matches_eager=None,
            graph_step_ms=None, graph_gain=None, launch_cost_us=None,
        ),
    ],
)  # fmt: skip


def sweep_point(m: int, time_us: float, bw_fraction: float | None) -> GemmSweepPoint:
    """One point; a fraction of None is a run without a peak figure (a CPU)."""
    return GemmSweepPoint(
        m=m, time_us=time_us, tflops=1.0, gbs=1.0, fraction_of_peak_flops=None if bw_fraction is None else 0.004,
        fraction_of_peak_bandwidth=bw_fraction, fraction_of_roofline=bw_fraction,
    )  # fmt: skip


def gemm_facts(shapes: list[GemmShapeSweep], skipped: list[GemmSkip] | None = None) -> GemmFacts:
    """A GPU sweep (bf16 and fp8 on an H200 preset) of the given shapes."""
    dtypes = sorted({s.dtype for s in shapes}) or ["bf16"]
    return GemmFacts(
        device="cuda", device_name="NVIDIA H200", dtypes=dtypes, dtypes_skipped={"fp8": "no fp8 here"} if "fp8" not in dtypes else {},
        shapes_source="option", scaled_for_cpu=False, hardware="NVIDIA H200 SXM 141GB",
        peak_tflops={d: {"bf16": 989.0, "fp8": 1979.0}[d] for d in dtypes}, peak_bandwidth_gbs=4800.0,
        m_values=sorted({p.m for s in shapes for p in s.points}), shapes=shapes, skipped=skipped or [],
    )  # fmt: skip


def gemm_shape(name: str, dtype: str, n: int, k: int, points: list[GemmSweepPoint], doubling: int | None = None) -> GemmShapeSweep:
    return GemmShapeSweep(name=name, n=n, k=k, dtype=dtype, weight_copies=5, points=points, m_doubling_time_at=doubling)


GPU_GEMM = gemm_facts(
    [
        gemm_shape("gate_up", "bf16", 4096, 7168, [
            GemmSweepPoint(m=1, time_us=15.3, tflops=3.84, gbs=3839.0, fraction_of_peak_flops=0.0039,
                           fraction_of_peak_bandwidth=0.80, fraction_of_roofline=0.80),
        ], doubling=128),
    ],
    skipped=[GemmSkip(name="down", dtype="bf16", reason="refused")],
)  # fmt: skip


def collective(op: str, message_bytes: int, wait_ms: float, transfer_ms: float = 1.0, late_rank: int = 1) -> CollectiveSummary:
    """Two ranks, ``late_rank`` arriving ``wait_ms`` after the other every time."""
    held = [0.0, 0.0]
    held[late_rank] = wait_ms
    return CollectiveSummary(
        op=op, message_bytes=message_bytes, group_size=2, iterations=20, interval_ms=wait_ms + transfer_ms,
        transfer_ms=transfer_ms, wait_ms=wait_ms, late_rank=late_rank, late_fraction=1.0, late_by_ms=wait_ms,
        hold_up_ms=held, mean_wait_ms=held[::-1], preceding_compute_ms=wait_ms, extra_compute_ms=wait_ms,
        bus_bandwidth_gbs=message_bytes / (transfer_ms / 1e3) / 1e9 if transfer_ms else None,
    )  # fmt: skip


def collectives_facts(items: list[CollectiveSummary], backend: str = "nccl") -> CollectivesFacts:
    return CollectivesFacts(
        backend=backend, backend_note=None, dtype="bfloat16", world_size=2, clock="time.time_ns",
        injected_delay=InjectedDelay(rank=1, ms=20.0), late_rank=1, collectives=items,
    )  # fmt: skip


COLLECTIVES = collectives_facts(
    [collective("all_reduce", 14336, 20.38, transfer_ms=0.031).model_copy(update={"interval_ms": 20.41, "bus_bandwidth_gbs": 0.462})]
)

CONTEXT_SWEEP = ContextSweepFacts(
    endpoint="http://127.0.0.1:8000/v1/completions", model="m", repeats=1,
    points=[
        ContextSweepPoint(prompt_tokens=200, output_tokens=12, context=206, step_ms=8.62, ttft_ms=6.1),
        ContextSweepPoint(prompt_tokens=6000, output_tokens=12, context=6006, step_ms=26.02, ttft_ms=122.0),
    ],
    step_ms_per_1k_context=3.0, step_intercept_ms=8.0, step_fit_r2=0.999, ttft_ms_per_1k_prompt=20.0,
)  # fmt: skip
