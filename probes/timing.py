"""Timing device work honestly: warm-up first, device-side clocks on a GPU, medians of repeats.

A host timer around an asynchronous CUDA launch measures the launch, not the kernel, so GPU
timings use CUDA events recorded on the stream; on the CPU the work is synchronous and a
monotonic host clock is right. Every loop checks the probe's deadline.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from diagnoser.probes.base import ProbeContext, ProbeSkipped


def synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def time_op(
    ctx: ProbeContext,
    fn: Callable[[], Any],
    *,
    repeats: int = 5,
    warmup: int = 2,
    inner: int = 1,
) -> list[float]:
    """Seconds per call of ``fn`` for each repeat (each repeat averages ``inner`` calls)."""
    for _ in range(warmup):
        fn()
        ctx.check_deadline()
    synchronize(ctx.device)
    samples: list[float] = []
    for _ in range(repeats):
        samples.append(_one_repeat(ctx.device, fn, inner) / inner)
        ctx.check_deadline()
    return samples


def _one_repeat(device: str, fn: Callable[[], Any], inner: int) -> float:
    if device == "cuda":
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    begin = time.perf_counter()
    for _ in range(inner):
        fn()
    return time.perf_counter() - begin


def median_s(ctx: ProbeContext, fn: Callable[[], Any], **kwargs: Any) -> float:
    return statistics.median(time_op(ctx, fn, **kwargs))


def require_device(ctx: ProbeContext) -> None:
    """Refuse a CUDA run on a machine where torch sees no GPU (the user asked for the wrong device)."""
    if ctx.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ProbeSkipped("--device cuda but torch sees no CUDA device")
