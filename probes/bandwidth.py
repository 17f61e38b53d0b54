"""Achieved memory bandwidth: the figure a decode bound should be built on.

Decode streams weights and KV cache once per step, so the step time is bytes over the
bandwidth the card actually sustains, not the datasheet's. The buffers are several times the
last-level cache so the cache cannot serve repeats, a copy counts its read and its write, and
the result is set against both the theoretical figure and the best plain torch copy measured
in the same run (which tells whether this probe's method leaves bandwidth on the table).
On a CPU the same code measures host memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from diagnoser.models.observations import ProbeFacts
from diagnoser.models.probe_results import BandwidthFacts, BandwidthTiming, LiveReadings
from diagnoser.probes.base import ProbeContext, ProbeSkipped, bounded_bytes
from diagnoser.probes.timing import median_s, require_device

CACHE_MULTIPLE = 8  # buffers at least this many times the last-level cache
MIN_BUFFER_BYTES = {"cuda": 1 << 30, "cpu": 64 << 20}
FLOAT_BYTES = 4
LOAD_COPIES = 100  # queued copies that keep the GPU busy while NVML is read (about 0.1 s on an H200)


def gbs(bytes_moved: float, seconds: float) -> float:
    return bytes_moved / seconds / 1e9


def host_cache_bytes(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """Largest CPU cache (the last level) from sysfs, e.g. '32768K'."""
    sizes = []
    for entry in root.glob("index*/size"):
        text = entry.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


def cache_bytes(device: str) -> int | None:
    if device == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)
    return host_cache_bytes()


def buffer_bytes(ctx: ProbeContext, cache: int | None) -> int:
    """Per-buffer size: the option if given, else several caches' worth; two buffers must fit the guard."""
    given = ctx.options.get("bandwidth_buffer_bytes")
    wanted = int(given) if given else max(CACHE_MULTIPLE * (cache or 0), MIN_BUFFER_BYTES[ctx.device])
    granted = bounded_bytes(ctx, 2 * wanted) // 2
    granted -= granted % (1 << 20)
    if granted < 1 << 20:
        raise ProbeSkipped(f"memory guard allows only {granted} bytes per buffer")
    if not given and granted < 2 * (cache or 0):
        raise ProbeSkipped(f"memory guard allows {granted} bytes per buffer, under twice the cache ({cache} bytes)")
    return granted


def theoretical_gbs(ctx: ProbeContext) -> tuple[float | None, str]:
    """The datasheet-style figure and where it came from (a flag, NVML, or nothing on a CPU)."""
    given = ctx.options.get("theoretical_bandwidth_gbs")
    if given:
        return float(given), "option"
    if ctx.device != "cuda":
        return None, "no theoretical figure for host memory (pass theoretical_bandwidth_gbs)"
    from diagnoser.probes.device import collect, torch_cuda_devices

    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    dev = collect(pynvml, torch_cuda_devices()).primary_device()
    if dev is None or dev.theoretical_bandwidth_gbs is None:
        return None, "NVML gave no bus width or memory clock"
    return dev.theoretical_bandwidth_gbs, "nvml"


def run(ctx: ProbeContext) -> BandwidthFacts:
    import torch

    require_device(ctx)
    cache = cache_bytes(ctx.device)
    size = buffer_bytes(ctx, cache)
    repeats = int(ctx.options.get("bandwidth_repeats", 7))
    src = torch.ones(size // FLOAT_BYTES, dtype=torch.float32, device=ctx.device)
    dst = torch.empty_like(src)
    timing = {"repeats": repeats, "warmup": 2, "inner": 3 if ctx.device == "cuda" else 1}

    read_s = median_s(ctx, lambda: src.sum(), **timing)
    copy_s = median_s(ctx, lambda: dst.copy_(src), **timing)
    read_gbs, copy_gbs = gbs(size, read_s), gbs(2 * size, copy_s)

    best_name, best_gbs = best_torch_copy(ctx, src, dst, timing)
    under_load = readings_under_load(lambda: dst.copy_(src)) if ctx.device == "cuda" else None
    measured = max(read_gbs, copy_gbs)
    theory, theory_source = theoretical_gbs(ctx)
    return BandwidthFacts(
        device=ctx.device,
        buffer_bytes=size,
        cache_bytes=cache,
        buffer_over_cache=size / cache if cache else None,
        dtype="float32",
        timing=BandwidthTiming(**timing),
        read_gbs=read_gbs,
        copy_gbs=copy_gbs,
        copy_bytes_counted="read + write (2 x buffer)",
        measured_bandwidth_gbs=measured,
        best_torch_copy_gbs=best_gbs,
        best_torch_copy_variant=best_name,
        fraction_of_best_torch_copy=measured / best_gbs,
        theoretical_bandwidth_gbs=theory,
        theoretical_source=theory_source,
        fraction_of_theoretical=measured / theory if theory else None,
        under_load=under_load,
    )


def readings_under_load(copy: Any) -> LiveReadings:
    """NVML clocks, clock-event reasons and power sampled while queued copies keep the GPU busy."""
    import torch

    from diagnoser.probes.device import sample_live

    try:
        import pynvml
    except ImportError:
        return LiveReadings.unread({"all": "nvidia-ml-py is not installed"})

    uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    for _ in range(LOAD_COPIES):
        copy()
    sample = sample_live(pynvml, uuid)
    torch.cuda.synchronize()
    return sample


def best_torch_copy(ctx: ProbeContext, src: Any, dst: Any, timing: dict[str, int]) -> tuple[str, float]:
    """The fastest of the plain copies torch offers, at a few sizes, as the yardstick."""
    results: dict[str, float] = {}
    n = src.numel()
    for share in (1, 2, 4):
        part = n // share
        a, b = src[:part], dst[:part]
        results[f"copy_ 1/{share} buffer"] = gbs(2 * part * FLOAT_BYTES, median_s(ctx, lambda: b.copy_(a), **timing))
    import torch

    src_bytes, dst_bytes = src.view(torch.uint8), dst.view(torch.uint8)
    results["copy_ as bytes"] = gbs(2 * n * FLOAT_BYTES, median_s(ctx, lambda: dst_bytes.copy_(src_bytes), **timing))
    name = max(results, key=results.__getitem__)
    return name, results[name]


def to_observations(facts: BandwidthFacts) -> dict[str, Any]:
    """Bandwidth figures, plus the clocks read under load, which supersede the device probe's idle ones."""
    load = facts.under_load or LiveReadings.unread({})
    return {
        "probe": ProbeFacts(
            measured_bandwidth_gbs=facts.measured_bandwidth_gbs,
            theoretical_bandwidth_gbs=facts.theoretical_bandwidth_gbs,
            sm_clock_mhz=load.sm_clock_mhz,
            mem_clock_mhz=load.mem_clock_mhz,
            power_w=load.power_w,
            **({"throttle_reasons": load.clock_event_reasons} if load.clock_event_reasons is not None else {}),
        )
    }
