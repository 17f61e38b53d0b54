"""Facts the rules match: one per aggregated observation part, never one per trace event.

experta matches at declare time and joins are quadratic, so a case turns into a few dozen
facts. Absent values are left out of a fact rather than stored as None: a pattern that names
a field then simply does not match, and the engine reports the missing input instead.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any, NamedTuple

from pydantic import BaseModel

from diagnoser.experta_compat import Fact
from diagnoser.models.case import Case
from diagnoser.models.hypothesis import BoundSummary
from diagnoser.models.observations import BoundaryTimings, GemmPoint, KernelClassObs, StepBudget


class Reference(Fact):
    """The step every gain is a share of (``step_ms``)."""


class Budget(Fact):
    """The critical rank's step budget, plus ``parts_ms`` and ``unattributed_ms``."""


class RankBudget(Fact):
    """The same step on one rank (from ``rank_budgets``)."""


class KernelClass(Fact):
    """One kernel class aggregated over the step; MoE adds ``reference_bw_fraction`` from a GEMM sweep."""


class Graph(Fact):
    """Graph replay status; ``max_captured_batch`` is derived from the capture list."""


class Collective(Fact):
    """One collective per step with its arrival skew."""


class Boundaries(Fact):
    """Device step, server emission and client receipt intervals.

    Server and client intervals are per chunk; ``server_token_ms``, ``client_token_ms`` and
    ``client_p99_token_ms`` divide them by ``tokens_per_chunk`` so they compare with the per-token device step
    (a stream of 3-token chunks is not 3x slower than its device).
    """


class ContextSweep(Fact):
    """Lowest and highest context of the sweep with their step times and ``growth`` ratio."""


class Probe(Fact):
    """Machine facts; ``throttled`` lists throttle reasons other than idle."""


class Speculation(Fact):
    """Speculation counters; ``speedup``, ``expected_tokens`` and ``cycle_ms`` when the costs are known."""


class Server(Fact):
    """Serving-engine settings."""


class Host(Fact):
    """Host-side facts between steps."""


class Bound(Fact):
    """The recomputed bound against the reference step."""


class QuotedBound(Fact):
    """How a bound someone already quoted was built (``bound_inputs``)."""


class Layout(Fact):
    """Parallel layout and batch of the pinned workload."""


class KernelSum(Fact):
    """Kernel time summed over ranks (``ms``): a total, not elapsed time."""


class ClaimedStep(Fact):
    """A step time someone added up from parts (``ms``)."""


class BoundaryPair(Fact):
    """The boundary the observation was read at (``observed``) and the one the bound refers to (``bound``)."""


class Claim(Fact):
    """An explanation already on the table (``name``)."""


class Holds(Fact):
    """A cause concluded: ``rule`` id, ``cap_ms`` (the most a refinement may claim) and the ``step_ms`` it refers to."""


class InputInfo(NamedTuple):
    label: str
    how: str


# Every input a rule may require, and how to obtain it: the text of a "check to run".
INPUTS: dict[str, InputInfo] = {
    "budget": InputInfo("step budget", "profile ~20 decode steps (nsys or torch profiler) and run `diagnoser analyze`"),
    "rank_budgets": InputInfo("per-rank step budgets", "trace every rank over the same steps and run `diagnoser analyze`"),
    "kernel_classes": InputInfo("kernel classes", "run `diagnoser analyze` on a decode trace (kernel summary)"),
    "graph": InputInfo("graph replay status", "run `diagnoser probe graphs` or read graph launches in an nsys trace"),
    "collectives": InputInfo("collective intervals", "trace all ranks and run `diagnoser analyze` (collective alignment)"),
    "boundaries": InputInfo("boundary timings", "run `diagnoser probe client` against the server next to a device trace"),
    "context_sweep": InputInfo("context sweep", "time the same output length at 3+ controlled context lengths"),
    "gemm_sweep": InputInfo("GEMM sweep", "run `diagnoser probe --only gemm --case CASE` on the serving GPU (expert shapes by rows)"),
    "probe": InputInfo("machine probes", "run `diagnoser probe` on the serving GPU (bandwidth, clocks, throttling)"),
    "speculation": InputInfo("speculation counters", "read draft length, acceptance and draft/verify time from the server metrics"),
    "server": InputInfo("server settings", "record the serving engine's flags (graphs, custom all-reduce, sampling, offload)"),
    "host": InputInfo("host timings", "trace the host side (nsys CPU sampling or py-spy) over the same steps"),
    "bound": InputInfo("bound", "pin the workload (`workload:` in the case) or give bound_inputs bytes and bandwidth"),
    "workload": InputInfo("workload pin", "add the `workload:` section (model, hardware, batch, context, layout)"),
    "bound_inputs": InputInfo("quoted bound inputs", "record how the spreadsheet's bound was computed (bound_inputs)"),
}


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _fields(model: BaseModel | None, **extra: Any) -> dict[str, Any]:
    data = {} if model is None else {k: _plain(v) for k, v in model if v is not None}
    data.update({k: v for k, v in extra.items() if v is not None})
    return data


def _boundaries(b: BoundaryTimings) -> Boundaries:
    per_chunk = b.tokens_per_chunk or 1.0
    return Boundaries(**_fields(
        b,
        server_token_ms=b.server_emission_ms / per_chunk if b.server_emission_ms else None,
        client_token_ms=b.client_receipt_ms / per_chunk if b.client_receipt_ms else None,
        client_p99_token_ms=b.client_p99_ms / per_chunk if b.client_p99_ms else None,
    ))


def gemm_reference(points: list[GemmPoint], rows: float) -> tuple[float, str] | None:
    """(fraction of peak bandwidth, dtype) the best plain expert GEMMs reach at ``rows`` rows.

    Each swept shape is read at ``rows`` by interpolating in log2(M), and held at its ends
    outside the sweep. An expert runs all its shapes, so a dtype's figure is their bytes over
    their time, which is the time-weighted mean of their fractions; the best dtype is the
    yardstick, since the served kernel may use any of them.
    """
    series: dict[tuple[str, str], list[GemmPoint]] = {}
    for p in points:
        series.setdefault((p.dtype, p.shape), []).append(p)
    by_dtype: dict[str, list[tuple[float, float]]] = {}
    for (dtype, _), pts in series.items():
        pts.sort(key=lambda p: p.m)
        x = math.log2(min(max(rows, pts[0].m), pts[-1].m))
        hi = next(i for i, p in enumerate(pts) if math.log2(p.m) >= x)
        lo = max(hi - 1, 0)
        span = math.log2(pts[hi].m) - math.log2(pts[lo].m)
        w = (x - math.log2(pts[lo].m)) / span if span else 1.0
        time = pts[lo].time_us + w * (pts[hi].time_us - pts[lo].time_us)
        fraction = pts[lo].bw_fraction + w * (pts[hi].bw_fraction - pts[lo].bw_fraction)
        by_dtype.setdefault(dtype, []).append((fraction, time))
    if not by_dtype:
        return None
    return max((sum(f * t for f, t in ft) / sum(t for _, t in ft), dtype) for dtype, ft in by_dtype.items())


def _kernel_class(k: KernelClassObs, budget: StepBudget | None, bound: BoundSummary | None, sweep: list[GemmPoint]) -> KernelClass:
    """A kernel class, with MoE figures a trace cannot give estimated from the pinned workload.

    Traces rarely record how many rows each expert GEMM got or how many bytes the fused-MoE
    kernels read. The bound knows both for the pinned batch: rows per touched expert, and the
    expert bytes the busiest rank must read, which over the class's measured time give an
    achieved-bandwidth estimate. Measured values always win; estimated ones are marked. With a
    GEMM sweep from the probe, ``reference_bw_fraction`` is what a plain GEMM reaches at the same
    rows per expert on this machine.
    """
    estimated: dict[str, float] = {}
    if k.kernel_class == "moe" and bound is not None:
        if k.tokens_per_expert is None and bound.rows_per_touched_expert is not None:
            estimated["tokens_per_expert"] = bound.rows_per_touched_expert
        class_ms = budget.device_ms * k.share_of_step if budget is not None else 0.0
        if k.achieved_bw_fraction is None and bound.expert_bytes and bound.bandwidth_gbs and class_ms > 0:
            estimated["achieved_bw_fraction"] = bound.expert_bytes / (class_ms / 1e3) / (bound.bandwidth_gbs * 1e9)
    reference: dict[str, Any] = {}
    rows = k.tokens_per_expert if k.tokens_per_expert is not None else estimated.get("tokens_per_expert")
    if k.kernel_class == "moe" and rows is not None and (found := gemm_reference(sweep, rows)) is not None:
        reference = {"reference_bw_fraction": found[0], "reference_dtype": found[1]}
    return KernelClass(**_fields(k, **estimated, **reference, estimated_from_bound=sorted(estimated) or None))


def reference_step_ms(case: Case) -> float | None:
    """The measured step the gains refer to: the budget's, else the device boundary, else the pin's."""
    obs = case.observations
    if obs.budget is not None:
        return obs.budget.step_ms
    if obs.boundaries is not None and obs.boundaries.device_step_ms is not None:
        return obs.boundaries.device_step_ms
    observed = case.workload.observed if case.workload else None
    return observed.step_ms if observed else None


def present_inputs(case: Case, bound: BoundSummary | None) -> set[str]:
    obs = case.observations
    present = {name for name in INPUTS if name in type(obs).model_fields and getattr(obs, name)}
    if bound is not None:
        present.add("bound")
    if case.workload is not None:
        present.add("workload")
    if case.bound_inputs is not None:
        present.add("bound_inputs")
    return present


def _context_sweep(case: Case) -> ContextSweep | None:
    points = sorted(case.observations.context_sweep, key=lambda p: p.context)
    if len(points) < 2 or points[0].context == points[-1].context:
        return None
    lo, hi = points[0], points[-1]
    return ContextSweep(
        points=len(points),
        context_lo=lo.context,
        context_hi=hi.context,
        step_lo_ms=lo.step_ms,
        step_hi_ms=hi.step_ms,
        growth=hi.step_ms / lo.step_ms,
    )


def _speculation(case: Case) -> Speculation | None:
    from diagnoser.whatif import speculation

    spec = case.observations.speculation
    if spec is None:
        return None
    derived: dict[str, Any] = {}
    costs = (spec.verify_ms, spec.draft_ms, spec.other_ms, spec.ordinary_step_ms)
    if spec.acceptance is not None and None not in costs:
        result = speculation(spec.acceptance, spec.draft_length, *costs)
        derived = {"expected_tokens": result.expected_tokens_per_cycle, "speedup": result.speedup, "cycle_ms": result.cycle_ms}
    return Speculation(**_fields(spec, **derived))


def _probe(case: Case) -> Probe | None:
    probe = case.observations.probe
    if probe is None:
        return None
    throttled = sorted(r for r in probe.throttle_reasons if "idle" not in r.lower())
    return Probe(**_fields(probe, throttled=throttled))


def _boundary_pair(case: Case) -> BoundaryPair | None:
    observed = case.workload.observed.boundary if case.workload and case.workload.observed else None
    bound = case.observations.bound_boundary or (case.bound_inputs.boundary if case.bound_inputs else None)
    if observed is None or bound is None:
        return None
    return BoundaryPair(observed=observed.value, bound=bound.value)


def case_facts(case: Case, bound: BoundSummary | None) -> list[Fact]:
    """Turn a case into the facts the rule base matches (aggregated; a few dozen at most)."""
    obs = case.observations
    facts: list[Fact | None] = []
    step = reference_step_ms(case) or (bound.observed_step_ms if bound else None)
    if step is not None:
        facts.append(Reference(step_ms=step))
    if obs.budget is not None:
        b = obs.budget
        facts.append(Budget(**_fields(b, parts_ms=b.parts_ms, unattributed_ms=max(0.0, b.step_ms - b.parts_ms))))
    facts += [RankBudget(**_fields(r, parts_ms=r.parts_ms)) for r in obs.rank_budgets]
    facts += [_kernel_class(k, obs.budget, bound, obs.gemm_sweep) for k in obs.kernel_classes]
    if obs.graph is not None:
        captured = obs.graph.captured_batch_sizes
        facts.append(Graph(**_fields(obs.graph, max_captured_batch=max(captured) if captured else None)))
    facts += [Collective(**_fields(c)) for c in obs.collectives]
    if obs.boundaries is not None:
        facts.append(_boundaries(obs.boundaries))
    facts.append(_context_sweep(case))
    facts.append(_probe(case))
    facts.append(_speculation(case))
    if obs.server is not None:
        facts.append(Server(**_fields(obs.server)))
    if obs.host is not None:
        facts.append(Host(**_fields(obs.host)))
    if bound is not None:
        facts.append(Bound(**{k: v for k, v in _fields(bound).items() if k != "sanity"}))
    if case.bound_inputs is not None:
        facts.append(QuotedBound(**_fields(case.bound_inputs)))
    if case.workload is not None:
        w = case.workload
        facts.append(Layout(tp=w.layout.tp, ep=w.layout.ep, pp=w.layout.pp, dp=w.layout.dp, batch=w.batch))
    if obs.kernel_sum_across_ranks_ms is not None:
        facts.append(KernelSum(ms=obs.kernel_sum_across_ranks_ms))
    if obs.claimed_step_ms is not None:
        facts.append(ClaimedStep(ms=obs.claimed_step_ms))
    facts.append(_boundary_pair(case))
    facts += [Claim(name=c.value) for c in sorted(set(obs.claims), key=lambda c: c.value)]
    return [f for f in facts if f is not None]
