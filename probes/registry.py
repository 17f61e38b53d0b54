"""Which probes exist, in the order they run, and the loop that runs them into one report.

Entries are "module:function" strings so that listing or selecting probes imports nothing;
a probe module is imported only when it runs, and a module that cannot be imported is
reported as that probe's failure rather than stopping the others.
"""

from __future__ import annotations

import importlib
import platform
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel

from diagnoser.errors import InputError
from diagnoser.models.probe_report import ProbeReport
from diagnoser.models.probe_results import ProbeResult, probe_result
from diagnoser.probes.base import ProbeContext, one_line, run_probe

PROBES: dict[str, str] = {
    "device": "diagnoser.probes.device:run",
    "bandwidth": "diagnoser.probes.bandwidth:run",
    "gemm": "diagnoser.probes.gemm:run",
    "graphs": "diagnoser.probes.graphs:run",
    "collectives": "diagnoser.probes.collectives:run",
    "client": "diagnoser.probes.client:run",
    "context_sweep": "diagnoser.probes.context_sweep:run",
}


def select(names: Iterable[str] | None) -> list[str]:
    """The requested probes in run order; unknown names are a usage error."""
    if not names:
        return list(PROBES)
    wanted = {n.strip() for n in names if n.strip()}
    unknown = sorted(wanted - PROBES.keys())
    if not wanted:
        raise InputError(f"--only: name at least one probe ({', '.join(PROBES)})")
    if unknown:
        raise InputError(f"--only: unknown probe(s) {', '.join(unknown)} (known: {', '.join(PROBES)})")
    return [n for n in PROBES if n in wanted]


def probe_module(name: str) -> Any:
    return importlib.import_module(PROBES[name].split(":")[0])


def load_probe(name: str) -> Callable[[ProbeContext], BaseModel]:
    module_name, attr = PROBES[name].split(":")
    return getattr(importlib.import_module(module_name), attr)


def _torch_version() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return str(torch.__version__)


def run_probes(
    ctx: ProbeContext,
    names: Iterable[str] | None = None,
    on_start: Callable[[str], None] | None = None,
    on_done: Callable[[ProbeResult], None] | None = None,
) -> ProbeReport:
    """Run the selected probes one after another; each outcome lands in the report."""
    report = ProbeReport(
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        host=platform.node(),
        torch_version=_torch_version(),
    )
    for name in select(names):
        if on_start:
            on_start(name)
        start = time.perf_counter()
        try:
            func = load_probe(name)
        except Exception as err:  # noqa: BLE001 - a missing or broken module fails only its probe
            result = probe_result(
                name=name, status="failed", reason=f"cannot load probe: {one_line(err)}", duration_s=time.perf_counter() - start
            )
        else:
            result = run_probe(name, func, ctx)
        report.results.append(result)
        if on_done:
            on_done(result)
    return report
