"""What every probe shares: its context, the memory guard and the per-probe timeout.

Probes run on someone's production GPU, so the guard rails live here rather than in each
probe: memory is asked for before it is taken and capped at a fraction of what is free, every
probe has a deadline, and nothing here changes device state.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ValidationError

from diagnoser.models.probe_results import ProbeResult, probe_result

DEFAULT_MEMORY_FRACTION = 0.25
DEFAULT_TIMEOUT_S = 60.0


class ProbeSkipped(Exception):
    """Raised by a probe that cannot apply here; the message is the reason shown to the user."""


class ProbeTimeout(Exception):
    """Raised by a probe's own loop when its deadline has passed."""


@dataclass
class ProbeContext:
    device: str = "cpu"  # "cuda" or "cpu"
    max_memory_fraction: float = DEFAULT_MEMORY_FRACTION
    timeout_s: float = DEFAULT_TIMEOUT_S
    options: dict[str, Any] = field(default_factory=dict)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("diagnoser.probes"))
    deadline: float | None = None  # time.monotonic() value; set by the runner for each probe

    def remaining_s(self) -> float:
        """Seconds left before this probe's deadline (infinite when none is set)."""
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def check_deadline(self) -> None:
        """Called inside measurement loops so a probe stops itself instead of being abandoned."""
        if self.remaining_s() <= 0:
            raise ProbeTimeout(f"deadline of {self.timeout_s:g} s reached")


def host_available_bytes() -> int:
    """Memory the kernel says can be allocated without swapping (MemAvailable)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def free_memory_bytes(device: str) -> int:
    if device == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info()
        return int(free)
    return host_available_bytes()


def bounded_bytes(ctx: ProbeContext, wanted: int) -> int:
    """At most ``wanted`` bytes and never more than the allowed fraction of free memory."""
    cap = int(free_memory_bytes(ctx.device) * ctx.max_memory_fraction)
    granted = max(0, min(int(wanted), cap))
    if granted < wanted:
        ctx.log.info("memory guard: asked for %d bytes, granted %d (%.0f%% of free)", wanted, granted, 100 * ctx.max_memory_fraction)
    return granted


def one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text}" if not isinstance(err, (ProbeSkipped, ProbeTimeout)) else text


GPU_EXTRA_MODULES = frozenset({"torch", "pynvml"})


def invalid_figure(name: str, err: ValidationError) -> str:
    """The reason a probe whose figures do not fit its model (a NaN, a negative time) failed."""
    from diagnoser.models.documents import validation_message

    return validation_message(err, f"{name} measured an invalid figure")


def run_probe(name: str, func: Callable[["ProbeContext"], BaseModel], ctx: ProbeContext) -> ProbeResult:
    """Run one probe under its deadline and turn every outcome into a ProbeResult.

    The probe runs in a daemon thread: a native call that hangs (a driver, a collective) cannot
    be interrupted from Python, so after the timeout the runner reports failure and moves on
    rather than hanging the whole report. A probe builds its own facts model, so a figure that
    came out NaN or negative fails the probe, with the field named, instead of reaching a case.
    """
    probe_ctx = replace(ctx, deadline=time.monotonic() + ctx.timeout_s)
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["facts"] = func(probe_ctx)
        except BaseException as err:  # noqa: BLE001 - every failure becomes a status, never a crash
            outcome["error"] = err

    start = time.perf_counter()
    worker = threading.Thread(target=target, name=f"probe-{name}", daemon=True)
    worker.start()
    worker.join(ctx.timeout_s + 1.0)
    duration = time.perf_counter() - start
    if worker.is_alive():
        return probe_result(name=name, status="failed", reason=f"timed out after {ctx.timeout_s:g} s", duration_s=duration)
    error = outcome.get("error")
    if isinstance(error, ProbeSkipped):
        return probe_result(name=name, status="skipped", reason=one_line(error), duration_s=duration)
    if isinstance(error, ModuleNotFoundError) and error.name in GPU_EXTRA_MODULES:
        # torch and nvidia-ml-py are an optional extra: a missing one is a reason, not a fault
        reason = f"{error.name} is not installed (pip install 'diagnoser[gpu]')"
        return probe_result(name=name, status="skipped", reason=reason, duration_s=duration)
    if isinstance(error, ValidationError):
        return probe_result(name=name, status="failed", reason=invalid_figure(name, error), duration_s=duration)
    if error is not None:
        ctx.log.debug("probe %s failed", name, exc_info=error)
        return probe_result(name=name, status="failed", reason=one_line(error), duration_s=duration)
    try:
        return probe_result(name=name, status="ok", duration_s=duration, facts=outcome.get("facts"))
    except ValidationError as err:  # facts of another probe's form, or none
        return probe_result(name=name, status="failed", reason=invalid_figure(name, err), duration_s=duration)
