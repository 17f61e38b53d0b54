"""Every field a rule may name, per fact class, with its unit and meaning, in one place.

A fact carries the fields of the pydantic model it is built from, plus a few the engine
derives (``Budget.parts_ms``, ``Graph.live_units``, ...). A pattern that names a field no fact
has never matches, silently; the loader checks every pattern against this table and names the
nearest valid field instead. ``diagnoser rules facts`` prints it for rule authors.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import get_args

from pydantic import BaseModel

from diagnoser.engine import facts as f
from diagnoser.models.case import BoundInputs
from diagnoser.errors import nearest
from diagnoser.models.documents import plain_types
from diagnoser.models.hypothesis import BoundSummary
from diagnoser.models.observations import (
    BoundaryTimings,
    BudgetShares,
    CollectiveObs,
    GraphReplayObs,
    HostObs,
    KernelClassObs,
    ProbeFacts,
    ServerConfig,
    SpeculationObs,
    StepBudget,
    StepMixObs,
)
from diagnoser.models.runtime import HostCost, MemoryObs, PlatformObs, RoutingObs, StreamObs
from diagnoser.models.serving import Expected, Percentiles, ServingMetrics


@dataclass(frozen=True)
class FieldInfo:
    name: str
    unit: str
    meaning: str
    derived: bool = False


# Units read from a field's name: one convention for every model.
_UNITS = (("_ms", "ms"), ("_us", "µs"), ("_gbs", "GB/s"), ("_gb", "GB"), ("_bytes", "B"), ("_mhz", "MHz"),
          ("_w", "W"), ("_c", "°C"), ("_s", "s"))


def unit_of(name: str) -> str:
    if name.endswith("_per_s"):
        return f"{name.removesuffix('_per_s').rsplit('_', 1)[-1]}/s"
    return next((unit for suffix, unit in _UNITS if name.endswith(suffix)), "")


_COUNTED = ("launches", "calls", "requests", "sequences", "preemptions", "concurrency", "ctas", "points", "batch",
            "per_step", "per_cycle", "experts", "ranks", "cores")


def _unit_of_field(name: str, annotation, description: str) -> str:
    """The name's unit, else what the type and wording say: a flag, a count, a share, a ratio, a
    name, so every field a condition may compare says what its numbers mean."""
    if unit := unit_of(name):
        return unit
    if name.startswith("ms_") or "_ms_per_" in name:
        return "ms" + name.partition("_ms")[2].replace("_", " ") if "_ms_per_" in name else "ms"
    meaning = description.lower()
    listed, kinds = _kinds(annotation)
    if kinds <= {bool}:
        unit = "true/false"
    elif "fraction" in meaning or "fraction" in name or name.endswith(("_share", "_usage", "_rate")) or name == "acceptance":
        unit = "fraction"
    elif name.endswith(("ratio", "speedup", "growth", "slowdown", "imbalance")):
        unit = "x"
    elif "bytes" in name:
        unit = "B"
    elif "token" in name or name.startswith("context_"):
        unit = "tokens"
    elif kinds <= {int} or any(word in name for word in _COUNTED) or name in ("tp", "ep", "pp", "dp"):
        unit = "count"
    elif all(isinstance(k, type) and issubclass(k, str) for k in kinds):
        unit = "text"
    else:
        unit = ""
    return f"list of {unit}" if listed and unit else unit


def _kinds(annotation) -> tuple[bool, set]:
    listed, kinds = plain_types(annotation)
    return listed, set(kinds) or {object}  # None (a derived field, its type not declared): nothing to read


def _model_fields(model: type[BaseModel], exclude: tuple[str, ...] = ()) -> dict[str, FieldInfo]:
    return {
        name: FieldInfo(name, _unit_of_field(name, field.annotation, field.description or ""), (field.description or "").strip())
        for name, field in model.model_fields.items()
        if name not in exclude
    }


def _percentile_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """``tpot_ms: {p50: ..}`` becomes ``tpot_p50_ms``: the flat names the Metrics fact carries."""
    out = {}
    for name, field in model.model_fields.items():
        if Percentiles not in get_args(field.annotation):
            continue
        for p in Percentiles.model_fields:
            flat = f.percentile_field(name, p)
            out[flat] = FieldInfo(flat, "ms", f"{field.description} ({p})")
    return out


def _derived(**fields: tuple[str, str]) -> dict[str, FieldInfo]:
    return {name: FieldInfo(name, unit or _unit_of_field(name, None, meaning), meaning, derived=True) for name, (unit, meaning) in fields.items()}


_PERCENTILE_SECTIONS = tuple(n for n, fl in ServingMetrics.model_fields.items() if Percentiles in get_args(fl.annotation))


def _run_diff_fields() -> dict[str, FieldInfo]:
    return _derived(
        base=("text", "baseline run"), other=("text", "the run compared with it"),
        setting=("text", "the one setting that differs, or 'several'"), changed=("text", "every setting that differs"),
        before=("text", "its value in the baseline"), after=("text", "its value in the other run"),
        figure=("text", "the figure both runs measured"), base_time=("", "baseline time per unit of work"),
        other_time=("", "other run's time per unit of work"), ratio=("x", "other_time / base_time"),
        slower=("text", "the setting's value in the slower run"), faster=("text", "its value in the faster run"),
        slower_time=("", "time per unit of the slower run"), faster_time=("", "time per unit of the faster run"),
        slowdown=("x", "slower_time / faster_time (>= 1)"),
        in_flight=("count", "requests both runs kept in flight (their shared concurrency or batch), when stated"),
        shared_cap=("count", "sequences both runs ran at once at most (their shared max_num_seqs, else batch), when stated"),
        repeat_spread=("fraction", "how far either run's figure moved between its own repeats (the wider), when stated"),
        observed_time=("ms", "the observation's time per token, where the A/B compares a time per token too"),
        includes_observed=("true/false", "one side is the run the observation's time per token comes from (None: not known)"),
    )


@lru_cache(maxsize=1)
def fact_table() -> dict[type, dict[str, FieldInfo]]:
    """Fact class -> field name -> what it is. The engine's builders in ``facts.py`` fill exactly these."""
    budget = _model_fields(StepBudget) | _derived(
        parts_ms=("ms", "sum of the budget's parts"),
        unattributed_ms=("ms", "step time no part accounts for"),
        most_exposed_comm_ms=("ms", "the most exposed communication any rank spent in the step (the critical rank's own, or a waiting rank's)"),
        most_exposed_rank=("", "the rank that spent it"),
    )
    return {
        f.Reference: _derived(step_ms=("ms", "the measured step every gain is a share of")),
        f.Budget: budget,
        f.RankBudget: _model_fields(StepBudget) | _derived(parts_ms=("ms", "sum of the budget's parts")),
        f.KernelClass: _model_fields(KernelClassObs) | _derived(
            reference_bw_fraction=("", "what a plain GEMM reaches at the same rows per expert (GEMM sweep)"),
            reference_dtype=("", "the dtype of that plain GEMM"),
            estimated_from_bound=("", "fields estimated from the pinned workload, not measured"),
        ),
        f.Graph: _model_fields(GraphReplayObs) | _derived(live_units=("", "the live batch in the capture list's unit")),
        f.Collective: _model_fields(CollectiveObs),
        f.Boundaries: _model_fields(BoundaryTimings) | _derived(
            server_token_ms=("ms", "server emission interval per token"),
            client_token_ms=("ms", "client receipt interval per token"),
            client_p99_token_ms=("ms", "client p99 interval per token"),
        ),
        f.ContextSweep: _derived(
            points=("", "points in the sweep"), context_lo=("", "shortest context"), context_hi=("", "longest context"),
            step_lo_ms=("ms", "step at the shortest context"), step_hi_ms=("ms", "step at the longest context"),
            growth=("", "step_hi / step_lo"), bound_growth=("", "growth of the pinned workload's bytes over the sweep"),
        ),
        f.Probe: _model_fields(ProbeFacts) | _derived(throttled=("", "throttle reasons other than idle")),
        f.Speculation: _model_fields(SpeculationObs) | _derived(
            expected_tokens=("", "E[tokens per cycle] under constant acceptance"),
            speedup=("", "against ordinary decode, costs not overlapped"),
            cycle_ms=("ms", "verify + draft + other"),
            draft_sweep_lo=("", "shortest draft length of runs that differ only in it"),
            draft_sweep_hi=("", "longest draft length of those runs"),
            draft_sweep_token_ms=("ms", "time per token at the longest draft"),
            draft_sweep_emitted=("", "tokens a cycle emits at the longest draft"),
            per_draft_ms=("ms", "what each further drafted token adds to a cycle, over those runs"),
            draft_off_token_ms=("ms", "time per token of the run with a draft length of 0"),
        ),
        f.Server: _model_fields(ServerConfig),
        f.Host: _model_fields(HostObs),
        f.Bound: _model_fields(BoundSummary, exclude=("sanity",)),
        f.Traffic: _derived(kv_read_share=("", "the KV cache read's share of the busiest rank's bytes per step")),
        f.QuotedBound: _model_fields(BoundInputs),
        f.Device: _derived(name=("text", "the preset the workload's hardware matched"), bandwidth_gbs=("GB/s", "its datasheet memory bandwidth"),
                           memory_gib=("GiB", "its memory"), sweep_ms=("ms", "reading all of its memory once at that bandwidth, or multiplying the weights it could hold at its half-precision rate where that is longer")),
        f.Layout: _derived(tp=("", "tensor-parallel ranks"), ep=("", "expert-parallel ranks"), pp=("", "pipeline stages"),
                           dp=("", "data-parallel attention ranks"), batch=("", "sequences decoding together, when stated"),
                           routed_experts=("", "the pinned model routes tokens to experts (absent when no known model is pinned)")),
        f.KernelSum: _derived(ms=("ms", "kernel time summed over ranks (not elapsed)")),
        f.ClaimedStep: _derived(ms=("ms", "a step someone added up from parts")),
        f.BoundaryPair: _derived(observed=("", "boundary the observation was read at"), bound=("", "boundary of the bound")),
        f.Claim: _derived(name=("", "an explanation already on the table")),
        f.Metrics: _model_fields(ServingMetrics, exclude=_PERCENTILE_SECTIONS) | _percentile_fields(ServingMetrics) | _derived(
            per_token_ms=("ms", "the most direct per-token interval reported (TPOT, ITL or 1/per-user rate)"),
            implied_per_token_ms=("ms", "concurrency / aggregate rate: what each stream would see"),
        ),
        f.Expectation: _model_fields(Expected),
        f.RunDiff: _run_diff_fields(),
        f.RepeatDecline: _derived(
            run=("text", "the run"), figure=("text", "the figure its repeats are of"), repeats=("count", "how many repeats it states"),
            decline=("x", "the first repeat's speed over the fastest later repeat's (> 1: every later one ran slower)"),
            peer_decline=("x", "the slowest later repeat over the first, for the steadiest other run on the same machine with as many repeats"),
        ),
        f.ConfoundedChange: _run_diff_fields() | _derived(
            setting=("text", "one of the settings that differ"), with_=("text", "the other settings that differ with it"),
        ),
        f.HostCostFact: _model_fields(HostCost),
        f.Routing: _model_fields(RoutingObs, exclude=("expert_load_per_rank",)) | _derived(
            ranks=("", "EP ranks with a measured load"), imbalance=("", "busiest rank's load over the mean"),
        ),
        f.Memory: _model_fields(MemoryObs),
        f.Platform: _model_fields(PlatformObs),
        f.Stream: _model_fields(StreamObs),
        f.StepMix: _model_fields(StepMixObs),
        f.Shares: _model_fields(BudgetShares),
        f.ObservedStep: _derived(ms=("ms", "the pinned observation as a step"), boundary=("", "where it was read")),
        f.Holds: _derived(rule=("", "a cause that concluded"), cap_ms=("ms", "the most a refinement may claim"),
                          step_ms=("ms", "the step that cap refers to")),
        f.Unevaluable: _derived(rule=("", "a cause whose required inputs are absent")),
    }


# Where each fact's fields come from in a case, as evidence names them (``graph.status``).
SECTION = {
    "Reference": "reference", "Budget": "budget", "RankBudget": "rank_budgets", "KernelClass": "kernel_classes",
    "Graph": "graph", "Collective": "collectives", "Boundaries": "boundaries", "ContextSweep": "context_sweep",
    "Probe": "probe", "Speculation": "speculation", "Server": "server", "Host": "host", "Bound": "bound",
    "QuotedBound": "bound_inputs", "Traffic": "traffic", "Layout": "workload.layout", "KernelSum": "kernel_sum_across_ranks",
    "ClaimedStep": "claimed_step", "BoundaryPair": "boundaries", "Claim": "claims", "Metrics": "metrics",
    "Expectation": "expected", "RunDiff": "runs", "RepeatDecline": "runs", "ConfoundedChange": "runs", "HostCostFact": "host_costs", "Routing": "routing",
    "Memory": "memory", "Platform": "platform", "Stream": "stream", "StepMix": "step_mix", "Shares": "budget_shares",
    "ObservedStep": "workload.observed", "Holds": "holds", "Unevaluable": "unevaluable",
}


def unknown_field(fact_class: type, name: str) -> str | None:
    """A one-line complaint when ``fact_class`` has no field ``name``; None when it does (or is not a bundled fact)."""
    fields = fact_table().get(fact_class)
    if fields is None or name in fields:
        return None
    hint = nearest(name, sorted(fields))
    return f"{fact_class.__name__} has no field {name!r}" + (f" (nearest: {hint})" if hint else "")
