"""Which results of a probe report may speak for the case: the right device, and a layout that has collectives.

A probe measures the machine it ran on. Run on a laptop or a CPU-only CI box and merged into an
H100 case, its host-memory bandwidth and gloo collectives would be read as the H100's and rank
"slow transfer" causes first; so results measured on another device are kept out, with a line
saying why. A single-rank layout (TP, EP, PP and DP all 1) has no collectives in its step, so
collective timings, wherever measured, say nothing about it. Probes against an endpoint (the
client, the context sweep) measure the server, wherever they ran, and are always kept.
"""

from __future__ import annotations

from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.hardware import Hardware, hardware_preset, match_hardware
from diagnoser.models.probe_report import ProbeReport

# Probes whose figures belong to the device they ran on.
DEVICE_PROBES = frozenset({"device", "bandwidth", "gemm", "graphs", "collectives"})
CPU = "the CPU (no GPU)"


def measured_on(report: ProbeReport) -> str | None:
    """The GPU the report measured (as its driver names it), CPU when it ran without one, None when it does not say."""
    for result in report.results:
        facts = result.facts
        if facts is None:
            continue
        if result.name == "device":
            primary = facts.primary_device()
            if primary is not None and primary.name:
                return primary.name
            if facts.torch_cuda == "not available" and not facts.devices:
                return CPU
        if getattr(facts, "device", None) == "cpu" or getattr(facts, "backend", None) == "gloo":
            return CPU
    return None


def case_hardware(case: Case) -> Hardware | None:
    """The preset the case's pin names; None when it names none, or one no preset matches."""
    name = case.workload.hardware if case.workload is not None else None
    if not name:
        return None
    try:
        return hardware_preset(name)
    except InputError:
        return None


def single_rank(case: Case) -> bool:
    layout = case.workload.layout if case.workload is not None else None
    return layout is not None and layout.tp == layout.ep == layout.pp == layout.dp == 1


def fit_report(case: Case, report: ProbeReport) -> tuple[ProbeReport, list[str]]:
    """The report with the results that cannot speak for ``case`` left out, and one warning for each reason."""
    warnings = []
    drop: set[str] = set()
    hardware, device = case_hardware(case), measured_on(report)
    if hardware is not None and device is not None:
        matched = None if device == CPU else match_hardware(device)
        if device == CPU or (matched is not None and matched.name != hardware.name):
            drop |= DEVICE_PROBES
            warnings.append(
                f"probe results from {device} on {report.host} kept out: the case is pinned to {hardware.name}; "
                "run the probes on that machine (only endpoint probes are merged)"
            )
    if single_rank(case) and "collectives" not in drop and any(r.name == "collectives" and r.facts is not None for r in report.results):
        drop.add("collectives")
        warnings.append("collective timings kept out: the case runs on one rank (TP=EP=PP=DP=1), so its step has no collectives")
    kept = [r for r in report.results if r.name not in drop or r.facts is None]
    return report.model_copy(update={"results": kept}), warnings
