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
from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.hardware import Hardware, hardware_preset
from diagnoser.models.model_spec import ModelFeature, resolve_model
from diagnoser.models.precision import DType, bytes_per_element
from diagnoser.models.hypothesis import BoundSummary
from diagnoser.engine.comparison import Observed, RunDelta, named_devices, repeat_decline, run_deltas, same_run, steadiest_peer, sweep_points
from diagnoser.models.observations import BoundaryTimings, CaptureUnit, ContextPoint, GraphReplayObs, GemmPoint, KernelClassObs, StepBudget
from diagnoser.models.runtime import HostCost, RoutingObs
from diagnoser.models.serving import Percentiles, ServingMetrics
from diagnoser.models.units import MIN_POSITIVE


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
    """Lowest and highest context of the sweep with their step times and ``growth`` ratio; ``bound_growth``
    is how much the pinned workload's bytes per step grow over the same contexts."""


class Probe(Fact):
    """Machine facts; ``throttled`` lists throttle reasons other than idle."""


class Speculation(Fact):
    """Speculation counters; ``cycle_ms`` when its three costs are timed, ``speedup`` and ``expected_tokens`` when the
    acceptance, the draft length and the ordinary step are known too."""


class Server(Fact):
    """Serving-engine settings."""


class Host(Fact):
    """Host-side facts between steps."""


class Bound(Fact):
    """The recomputed bound against the reference step."""


class Traffic(Fact):
    """How the pinned workload's bytes per step divide (``kv_read_share``), known without the GPU."""


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


class Metrics(Fact):
    """Serving figures of the slow configuration; percentiles flattened (``tpot_p50_ms``) and
    ``per_token_ms``, the most direct per-token interval reported."""


class Expectation(Fact):
    """The figure the slow run was compared with, and what kind of reference it is."""


class RunDiff(Fact):
    """One run against the baseline: ``setting`` (or ``several``), ``ratio`` of time per unit (above 1 is slower),
    ``base_time``/``other_time`` and the ``figure`` they come from; ``slower``/``faster`` are the setting's values
    in the slower and faster run, ``slowdown`` (>= 1) and ``slower_time``/``faster_time`` read it either way round;
    ``in_flight`` is the load both runs kept in flight, when they state the same, and ``shared_cap`` the sequences both
    ran at once at most; ``observed_time`` the observation's time per token where the A/B compares one, and
    ``includes_observed`` whether one side is the run it comes from (None: not known)."""


class RepeatDecline(Fact):
    """A run whose first repeat, in the order they ran, was its fastest: ``decline`` (> 1) is how many times slower the
    fastest later repeat ran, over ``repeats`` repeats of ``figure``; ``peer_decline`` how much slower the slowest later
    repeat ran than the first in the steadiest other run on the same machine that states as many repeats."""


class ConfoundedChange(Fact):
    """One of several settings that differ between a slower run and its baseline, with the RunDiff fields of an
    A/B of that setting alone and ``with_`` the other changes: a mechanism that owns it is a suspect, not a
    measurement."""


class HostCostFact(Fact):
    """One named host cost per step (``name``, ``ms_per_step`` or ``share_of_step``, ``measured``, ``grows_with``)."""


class Routing(Fact):
    """MoE routing; ``imbalance`` is the busiest EP rank's load over the mean."""


class Memory(Fact):
    """KV and weight capacity facts."""


class Platform(Fact):
    """Build and platform facts."""


class Device(Fact):
    """The pinned device's datasheet (a preset the workload's hardware names): ``sweep_ms`` is the time it takes to
    read every byte of its memory once, the longest any decode step on it can spend reading (or, on a part with slow
    half-precision arithmetic, to multiply the weights that memory could hold, when that is longer)."""


class Stream(Fact):
    """Stream burstiness."""


class StepMix(Fact):
    """Decode-only, prefill and mixed steps of a trace."""


class Shares(Fact):
    """A budget quoted only as shares of a step of unknown length."""


class ObservedStep(Fact):
    """The pinned observation as a step time (``ms``) and its ``boundary``; a rate is turned into a step
    only when the case states the batch."""


class Holds(Fact):
    """A cause concluded: ``rule`` id, ``cap_ms`` (the most a refinement may claim) and the ``step_ms`` it refers to."""


class Unevaluable(Fact):
    """A cause ``rule`` whose required inputs are absent: its refinements may fire on their own evidence."""


class InputInfo(NamedTuple):
    label: str
    how: str


# Every input a rule may require, and how to obtain it: the text of a "check to run".
INPUTS: dict[str, InputInfo] = {
    "budget": InputInfo("step budget", "profile ~20 decode steps (nsys or torch profiler) and run `diagnoser analyze`"),
    "rank_budgets": InputInfo("per-rank step budgets", "trace every rank over the same steps and run `diagnoser analyze`"),
    "kernel_classes": InputInfo("kernel classes", "run `diagnoser analyze` on a decode trace (kernel summary)"),
    "graph": InputInfo("graph replay status", "run `diagnoser probe --only graphs` or read graph launches in an nsys trace"),
    "collectives": InputInfo("collective intervals", "trace all ranks and run `diagnoser analyze` (collective alignment)"),
    "boundaries": InputInfo("boundary timings", "run `diagnoser probe --only client --endpoint URL --model-name MODEL` next to a device trace"),
    "context_sweep": InputInfo("context sweep", "time the same output length at 3+ controlled context lengths"),
    "gemm_sweep": InputInfo("GEMM sweep", "run `diagnoser probe --only gemm --case CASE` on the serving GPU (expert shapes by rows)"),
    "probe": InputInfo("machine probes", "run `diagnoser probe` on the serving GPU (bandwidth, clocks, throttling)"),
    "speculation": InputInfo("speculation counters", "read draft length, acceptance and draft/verify time from the server metrics"),
    "server": InputInfo("server settings", "record the serving engine's flags (graphs, custom all-reduce, sampling, offload)"),
    "host": InputInfo("host timings", "trace the host side (nsys CPU sampling or py-spy) over the same steps"),
    "bound": InputInfo("bound", "pin the workload (`workload:` in the case) or give bound_inputs bytes and bandwidth"),
    "workload": InputInfo("workload pin", "add the `workload:` section (model, hardware, batch, context, layout)"),
    "workload.context": InputInfo("context length", "give workload.context: the mean tokens each decoding sequence holds (prompt plus output so far), or one per sequence"),
    "workload.precision": InputInfo("served precision", "give workload.precision: the weights' and KV cache's storage format as served (int4, fp8, bf16)"),
    "bound_inputs": InputInfo("quoted bound inputs", "record how the spreadsheet's bound was computed (bound_inputs)"),
    "metrics": InputInfo("serving metrics", "record TPOT/ITL p50/p99, tokens/s and concurrency from the serving benchmark (`diagnoser probe --only client --endpoint URL --model-name MODEL`)"),
    "expected": InputInfo("expected figure", "record what the figure was compared with and how it was obtained (expected:)"),
    "runs": InputInfo("A/B runs", "run the same workload with one setting changed (version, flag, batch) and record both figures"),
    "host_costs": InputInfo("named host costs", "time the host work per step by name (py-spy or nsys CPU sampling of the engine loop)"),
    "routing": InputInfo("expert routing", "log tokens per expert and per EP rank for a few decode steps"),
    "memory": InputInfo("memory facts", "read KV-cache usage, preemptions and waiting requests from the server metrics"),
    "platform": InputInfo("build and platform", "record the build type, GPU architecture, device API and CPU threads vs cores"),
    "stream": InputInfo("stream timing", "record per-chunk arrival times of a few streams (`diagnoser probe --only client --endpoint URL --model-name MODEL`)"),
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


def _most_exposed(critical: StepBudget, ranks: list[StepBudget]) -> dict[str, Any]:
    """The rank of the budgeted step that spent the most of it in exposed communication. The critical rank
    computes while the others wait at its collectives, so a straggler's cost is exposed on the ranks that
    wait, not in the critical rank's own budget."""
    comms = [(r.exposed_comm_ms, r.rank) for r in (critical, *ranks) if r.exposed_comm_ms is not None]
    if not comms:
        return {}
    comm, rank = max(comms, key=lambda c: c[0])
    return {"most_exposed_comm_ms": comm, "most_exposed_rank": rank}


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
        class_ms = budget.device_ms * k.share_of_step if budget is not None and k.share_of_step is not None else 0.0
        if k.achieved_bw_fraction is None and bound.expert_bytes and bound.bandwidth_gbs and class_ms > 0:
            estimated["achieved_bw_fraction"] = bound.expert_bytes / (class_ms / 1e3) / (bound.bandwidth_gbs * 1e9)
    reference: dict[str, Any] = {}
    rows = k.tokens_per_expert if k.tokens_per_expert is not None else estimated.get("tokens_per_expert")
    if k.kernel_class == "moe" and rows is not None and (found := gemm_reference(sweep, rows)) is not None:
        reference = {"reference_bw_fraction": found[0], "reference_dtype": found[1]}
    return KernelClass(**_fields(k, **estimated, **reference, estimated_from_bound=sorted(estimated) or None))


def reference_step_ms(case: Case) -> float | None:
    """The measured step the gains refer to: the budget's, else the device boundary, else the pin's, else the served
    time per token, else a trace's decode-only step (the device step of a trace that was not budgeted)."""
    obs = case.observations
    if obs.budget is not None:
        return obs.budget.step_ms
    if obs.boundaries is not None and obs.boundaries.device_step_ms is not None:
        return obs.boundaries.device_step_ms
    observed = case.workload.observed if case.workload else None
    if observed is not None and observed.step_ms is not None:
        return observed.step_ms
    served = obs.metrics.per_token_ms() if obs.metrics else None
    return served if served is not None else (obs.step_mix.decode_step_ms if obs.step_mix else None)


def shares_budget(case: Case) -> StepBudget | None:
    """A budget quoted as shares, made absolute with the measured step when one is known."""
    obs = case.observations
    shares = obs.budget_shares
    if obs.budget is not None or shares is None:
        return None
    step = reference_step_ms(case)
    if step is None or step < MIN_POSITIVE:  # a step derived from an absurd rate is no step
        return None
    return StepBudget(
        step_ms=step,
        device_ms=shares.device * step,
        exposed_comm_ms=shares.exposed_comm * step,
        launch_ms=shares.launch * step,
        queue_ms=shares.queue * step,
        host_ms=shares.host * step,
        source=f"shares of the measured step{': ' + shares.source if shares.source else ''}",
    )


def input_info(name: str) -> InputInfo:
    """What an input is and how to get it; ``input.field`` names one field of it, described on its own when INPUTS has it."""
    if name in INPUTS:
        return INPUTS[name]
    top, _, field = name.partition(".")
    info = INPUTS[top]
    return InputInfo(f"{info.label} ({field})", info.how) if field else info


def _fields_present(value: Any) -> set[str]:
    """Fields given in an observation section (in any element of a list of them)."""
    models = value if isinstance(value, list) else [value]
    return {k for m in models if isinstance(m, BaseModel) for k, v in m if v is not None and v != []}


def present_inputs(case: Case, bound: BoundSummary | None) -> set[str]:
    """The inputs the case holds, and ``input.field`` for each field given, so a rule may require
    one field of a section (a client gap needs the device step, not just any boundary timing)."""
    obs = case.observations
    present = {name for name in INPUTS if name in type(obs).model_fields and getattr(obs, name)}
    present |= {f"{name}.{field}" for name in list(present) for field in _fields_present(getattr(obs, name))}
    if shares_budget(case) is not None:
        present.add("budget")
    if bound is not None:
        present.add("bound")
    if case.workload is not None:
        present.add("workload")
    if case.bound_inputs is not None:
        present.add("bound_inputs")
    return present


def _graph(g: GraphReplayObs) -> Graph:
    """``live_units``: the live batch in the capture list's unit. A capture list counted in tokens
    holds ``k+1`` tokens per sequence while verifying ``k`` drafts, so 16 sequences need a 64-token graph at k = 3."""
    live = g.live_batch_size
    if live is not None and g.capture_unit is CaptureUnit.tokens:
        live *= g.query_tokens_per_sequence or 1
    return Graph(**_fields(g, live_units=live))


def _observed_step(case: Case) -> ObservedStep | None:
    from diagnoser.bound.floor import step_ms_from_rate

    w = case.workload
    observed = w.observed if w else None
    if observed is None:
        return None
    ms = observed.step_ms
    if ms is None and "batch" in w.model_fields_set:
        ms = step_ms_from_rate(observed.tokens_per_s, w.batch, w.tokens_per_step)
    return ObservedStep(ms=ms, boundary=observed.boundary.value) if ms is not None else None


def _context_sweep(case: Case) -> ContextSweep | None:
    """The sweep as given, else runs that differ only in context (or prompt length)."""
    points = sorted(case.observations.context_sweep, key=lambda p: p.context)
    if len(points) < 2:
        runs = case.observations.runs
        swept = sweep_points(runs, "context") or sweep_points(runs, "input_tokens")
        points = [ContextPoint(context=int(c), step_ms=t) for c, t in swept]
    if len(points) < 2 or points[0].context == points[-1].context:
        return None
    lo, hi = points[0], points[-1]
    return ContextSweep(**_fields(
        None,
        points=len(points),
        context_lo=lo.context,
        context_hi=hi.context,
        step_lo_ms=lo.step_ms,
        step_hi_ms=hi.step_ms,
        growth=hi.step_ms / lo.step_ms,
        bound_growth=_bound_growth(case, lo.context, hi.context),
    ))


def _bound_growth(case: Case, lo: int, hi: int) -> float | None:
    """The growth of the pinned workload's bytes per step over the sweep, when the model is pinned."""
    from diagnoser.bound.estimate import bytes_growth
    from diagnoser.errors import InputError

    workload = case.workload
    if workload is None or workload.model is None:
        return None
    try:
        return bytes_growth(workload, lo, hi)
    except InputError:
        return None


def _traffic(case: Case) -> Traffic | None:
    """The KV read's share of the bytes, when the model and the context it reads are both pinned: without a
    context the bound counts no KV read, and a share of zero would make any attention time look slow."""
    from diagnoser.bound.estimate import kv_read_share
    from diagnoser.errors import InputError

    workload = case.workload
    if workload is None or workload.model is None or not workload.context_given:
        return None
    try:
        return Traffic(kv_read_share=kv_read_share(workload))
    except InputError:
        return None


def _speculation(case: Case) -> Speculation | None:
    from diagnoser.whatif import speculation

    spec = case.observations.speculation
    if spec is None:
        return None
    derived: dict[str, Any] = {}
    costs = (spec.verify_ms, spec.draft_ms, spec.other_ms, spec.ordinary_step_ms)
    # a cycle stated to cost nothing has no finite speed-up to derive; the counters still stand
    if None not in costs[:3] and sum(costs[:3]) > 0:
        derived = {"cycle_ms": sum(costs[:3])}
        if spec.acceptance is not None and spec.draft_length is not None and spec.ordinary_step_ms is not None:
            result = speculation(spec.acceptance, spec.draft_length, *costs)
            derived |= {"expected_tokens": result.expected_tokens_per_cycle, "speedup": result.speedup}
    return Speculation(**_fields(spec, **derived, **_draft_sweep(case.observations.runs, spec)))


def _draft_sweep(runs: list, spec) -> dict[str, float]:
    """What one more drafted token costs a cycle, from runs that differ only in the draft length: the time per token
    times the tokens a cycle emits is the cycle at each length, and its growth from the shortest to the longest draft,
    per draft, is the drafting and the verify row each draft adds. The counters' acceptance was read at one length
    (the case's draft length, else the longest swept); later drafts are kept less often, so the yield at the other
    length comes from the constant conditional acceptance that gives the measured share there."""
    from diagnoser.whatif import acceptance_from_rate, expected_tokens_per_cycle

    points = sweep_points(runs, "draft_length")
    drafted = [(int(k), ms) for k, ms in points if k >= 1 and float(k).is_integer()]  # a draft length counts whole tokens
    if spec.acceptance_rate is None or len({k for k, _ in drafted}) < 2:
        return {}
    (k_lo, ms_lo), (k_hi, ms_hi) = drafted[0], drafted[-1]
    read_at = spec.draft_length if spec.draft_length in {k for k, _ in drafted} else k_hi
    a = acceptance_from_rate(spec.acceptance_rate, read_at)
    cycle_lo, cycle_hi = ms_lo * expected_tokens_per_cycle(a, k_lo), ms_hi * expected_tokens_per_cycle(a, k_hi)
    off = [ms for k, ms in points if k == 0]
    return {"draft_sweep_lo": k_lo, "draft_sweep_hi": k_hi, "draft_sweep_token_ms": ms_hi,
            "draft_sweep_emitted": expected_tokens_per_cycle(a, k_hi), "per_draft_ms": (cycle_hi - cycle_lo) / (k_hi - k_lo),
            **({"draft_off_token_ms": off[0]} if off else {})}


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


def with_derived_budget(case: Case) -> Case:
    """The case with a shares-only budget made absolute, so every rule sees one budget."""
    budget = shares_budget(case)
    if budget is None:
        return case
    return case.model_copy(update={"observations": case.observations.model_copy(update={"budget": budget})})


def percentile_field(section: str, percentile: str) -> str:
    """The flat Metrics field for one percentile of a section: ``tpot_ms`` at p50 is ``tpot_p50_ms``."""
    return f"{section.removesuffix('_ms')}_{percentile}_ms"


def _percentiles(section: str, p: Percentiles | None) -> dict[str, float]:
    if p is None:
        return {}
    return {percentile_field(section, k): v for k, v in p if v is not None}


def _metrics(m: ServingMetrics) -> Metrics:
    flat = {k: _plain(v) for k, v in m if v is not None and not isinstance(v, Percentiles)}
    for section, value in m:
        if isinstance(value, Percentiles):
            flat.update(_percentiles(section, value))
    per_token = m.per_token_ms()
    if per_token is not None:
        flat["per_token_ms"] = per_token
    if m.output_tokens_per_s and m.concurrency:
        # What each stream would see if the aggregate rate were shared evenly by the streams in flight.
        flat["implied_per_token_ms"] = 1e3 * m.concurrency / m.output_tokens_per_s
    return Metrics(**flat)


# Run figures that are one stream's time per token (ms per token, not the aggregate's or a job's).
PER_TOKEN_FIGURES = frozenset({"per_token_ms", "per_user_tokens_per_s"})


def _includes_observed(d: RunDelta, observed: float | None) -> bool | None:
    """Whether one side of the A/B is the run the observation's figures come from (its time per token is the
    observation's), so that counters read beside the observation describe one of its sides; None where the case
    gives no time per token, or the A/B compares another figure."""
    if observed is None:
        return None
    return any(same_run(t, observed) for t in (d.base_time, d.other_time))


def _run_diff(d: RunDelta, observed_ms: float | None = None) -> RunDiff:
    slower, slower_time, faster, faster_time = d.slower_side
    # the observation's time per token, where the A/B compares one too: the two are then on one scale
    observed = observed_ms if d.figure in PER_TOKEN_FIGURES else None
    return RunDiff(
        base=d.base, other=d.other, setting=d.setting, changed=list(d.changed), before=d.before, after=d.after,
        figure=d.figure, base_time=d.base_time, other_time=d.other_time, ratio=d.ratio,
        slower=slower, faster=faster, slower_time=slower_time, faster_time=faster_time, slowdown=slower_time / faster_time,
        includes_observed=_includes_observed(d, observed),
        **({"observed_time": observed} if observed is not None else {}),
        **({"in_flight": d.in_flight} if d.in_flight is not None else {}),
        **({"shared_cap": d.shared_cap} if d.shared_cap is not None else {}),
        **({"repeat_spread": d.repeat_spread} if d.repeat_spread is not None else {}),
    )


def _confounded(d: RunDelta) -> list[ConfoundedChange]:
    """Each change of a several-settings delta, read as if it were the only one."""
    if len(d.values) < 2:
        return []
    diff = _run_diff(d).as_dict()
    found = []
    for name, before, after in d.values:
        slower, _, faster, _ = d.oriented(before, after)
        found.append(ConfoundedChange(**{**diff, "setting": name, "before": before, "after": after, "slower": slower,
                                         "faster": faster, "with_": [n for n in d.changed if n != name]}))
    return found


def _run_diffs(case: Case) -> list[Fact]:
    metrics = case.observations.metrics
    observed_ms = metrics.per_token_ms() if metrics is not None else None
    observed = Observed(observed_ms, metrics.output_tokens_per_s, metrics.duration_s) if metrics is not None else None
    deltas = run_deltas(named_devices(case.observations.runs, case.workload.hardware if case.workload is not None else None), observed)
    return [_run_diff(d, observed_ms) for d in deltas] + [c for d in deltas for c in _confounded(d)]


def _repeat_declines(case: Case) -> list[Fact]:
    found = []
    for run in case.observations.runs:
        decline = repeat_decline(run)
        if decline is not None:
            peer = steadiest_peer(run, case.observations.runs)
            found.append(RepeatDecline(run=run.name, figure=decline[0], decline=decline[1], repeats=len(run.repeats),
                                       **({"peer_decline": peer} if peer is not None else {})))
    return found


def _host_cost(c: HostCost) -> HostCostFact:
    return HostCostFact(**_fields(c, grows_with=[g.value for g in c.grows_with] or None))


def _routing(r: RoutingObs) -> Routing:
    loads = r.expert_load_per_rank
    mean = sum(loads) / len(loads) if loads else 0.0
    imbalance = max(loads) / mean if len(loads) > 1 and mean > 0 else None
    fields = {k: v for k, v in _fields(r).items() if k != "expert_load_per_rank"}
    return Routing(**fields, **_fields(None, ranks=len(loads) or None, imbalance=imbalance))


def model_features(case: Case) -> frozenset[ModelFeature] | None:
    """The pinned model's parts, or None when no model is pinned or none matches the name: then
    nothing is known that would keep a rule from applying."""
    model = case.workload.model if case.workload is not None else None
    if model is None:
        return None
    try:
        return resolve_model(model).features
    except InputError:
        return None


def _device(case: Case) -> Device | None:
    """The datasheet of the device the workload names, when a preset matches it (one device, not a list of them)."""
    name = case.workload.hardware if case.workload is not None else None
    if name is None:
        return None
    try:
        hw = hardware_preset(name)
    except InputError:
        return None
    return Device(**_fields(None, name=hw.name, bandwidth_gbs=hw.memory_bandwidth_gbs, memory_gib=hw.memory_gib, sweep_ms=sweep_ms(hw)))


# The most arithmetic a byte of weights asks of a decode step: a weight-only 4-bit format holds about two weights a byte,
# each one multiply-add (2 FLOPs) per token.
FLOPS_PER_WEIGHT_BYTE = 2 / bytes_per_element(DType.int4)


def sweep_ms(hw: Hardware) -> float | None:
    """The longest a working device needs for one step over every byte it holds: reading them, or, on a part whose
    half-precision arithmetic is slow (fp16 at a fraction of its fp32 rate, no tensor cores), multiplying the weights
    they could hold at that rate, whichever is longer. On every part with tensor cores the read is hundreds of times
    longer."""
    if hw.memory_gib is None:
        return None
    nbytes = hw.memory_gib * 2**30
    read = nbytes / (hw.memory_bandwidth_gbs * 1e9) * 1e3
    half = hw.peak_tflops.get(DType.fp16) or hw.peak_tflops.get(DType.bf16)
    return read if half is None else max(read, nbytes * FLOPS_PER_WEIGHT_BYTE / (half * 1e12) * 1e3)


def case_facts(case: Case, bound: BoundSummary | None) -> list[Fact]:
    """Turn a case into the facts the rule base matches (aggregated; a few dozen at most)."""
    obs = case.observations
    facts: list[Fact | None] = []
    step = reference_step_ms(case) or (bound.observed_step_ms if bound else None)
    if step is not None:
        facts.append(Reference(step_ms=step))
    if obs.budget is not None:
        b = obs.budget
        facts.append(Budget(**_fields(b, parts_ms=b.parts_ms, unattributed_ms=max(0.0, b.step_ms - b.parts_ms),
                                      **_most_exposed(b, obs.rank_budgets))))
    facts += [RankBudget(**_fields(r, parts_ms=r.parts_ms)) for r in obs.rank_budgets]
    facts += [_kernel_class(k, obs.budget, bound, obs.gemm_sweep) for k in obs.kernel_classes]
    if obs.graph is not None:
        facts.append(_graph(obs.graph))
    facts += [Collective(**_fields(c)) for c in obs.collectives]
    if obs.boundaries is not None:
        facts.append(_boundaries(obs.boundaries))
    facts.append(_context_sweep(case))
    facts.append(_traffic(case))
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
        # The batch only when the case states it: the calculator's default of 1 is no evidence.
        batch = w.batch if "batch" in w.model_fields_set else None
        features = model_features(case)
        experts = None if features is None else ModelFeature.moe in features
        facts.append(Layout(**_fields(None, tp=w.layout.tp, ep=w.layout.ep, pp=w.layout.pp, dp=w.layout.dp, batch=batch,
                                      routed_experts=experts)))
    if obs.kernel_sum_across_ranks_ms is not None:
        facts.append(KernelSum(ms=obs.kernel_sum_across_ranks_ms))
    if obs.claimed_step_ms is not None:
        facts.append(ClaimedStep(ms=obs.claimed_step_ms))
    facts.append(_device(case))
    facts.append(_boundary_pair(case))
    facts.append(_observed_step(case))
    facts += [Claim(name=c) for c in sorted({_plain(c) for c in obs.claims})]
    if obs.metrics is not None:
        facts.append(_metrics(obs.metrics))
    if obs.expected is not None:
        facts.append(Expectation(**_fields(obs.expected)))
    facts += _run_diffs(case)
    facts += _repeat_declines(case)
    facts += [_host_cost(c) for c in obs.host_costs]
    if obs.routing is not None:
        facts.append(_routing(obs.routing))
    for fact_type, model in ((Memory, obs.memory), (Platform, obs.platform), (Stream, obs.stream), (StepMix, obs.step_mix)):
        if model is not None:
            facts.append(fact_type(**_fields(model)))
    if obs.budget_shares is not None and obs.budget is None:
        facts.append(Shares(**_fields(obs.budget_shares)))
    return [f for f in facts if f is not None]
