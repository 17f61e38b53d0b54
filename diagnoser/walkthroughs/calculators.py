"""The calculators a walkthrough may name, and the lines each one shows as its working.

Each entry wraps a calculator the CLI already uses (the floor, the per-rank bound, Amdahl,
speculation, the batch estimate, a rate and its step), so a walkthrough's expected figure is
the tool's figure. The working shown with an answer comes from the same renderers
`diagnoser bound` and `diagnoser whatif` print with. Two small ones exist only here: several
parts of a step changed at once (the arithmetic of a promise that a graph removes a whole
gap), and the step of ranks that run side by side (the slowest one, not their sum).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ValidationError, validate_call
from rich.console import Console

from diagnoser.bound import compute_bound, floor_from_bytes
from diagnoser.bound.batching import batch_estimate
from diagnoser.bound.floor import compare_with_observation, step_ms_from_rate
from diagnoser.errors import InputError
from diagnoser.models.documents import validation_message
from diagnoser.models.workload import Workload
from diagnoser.report import render_amdahl, render_batch, render_speculation
from diagnoser.report.bound import render_floor
from diagnoser.whatif import amdahl, speculation

GB = 1e9


class RanksStep(BaseModel):
    """A synchronized step over ranks that work at the same time."""

    ranks_ms: dict[str, float]
    step_ms: float
    slowest_rank: str
    summed_ms: float


def ranks_step(ranks_parts_ms: dict[str, dict[str, float]]) -> RanksStep:
    """Each rank's non-overlapping parts add up to its own critical path; ranks that meet at every
    collective finish the step together, so the step is the slowest of them. Adding the ranks
    counts concurrent time once per rank: a resource total, not elapsed time."""
    if not ranks_parts_ms or any(v < 0 for parts in ranks_parts_ms.values() for v in parts.values()):
        raise ValueError("give each rank's parts in ms, all >= 0")
    totals = {rank: sum(parts.values()) for rank, parts in ranks_parts_ms.items()}
    slowest = max(totals, key=totals.__getitem__)
    return RanksStep(ranks_ms=totals, step_ms=totals[slowest], slowest_rank=slowest, summed_ms=sum(totals.values()))


def amdahl_several(parts_ms: dict[str, float], set_ms: dict[str, float]):
    """Change several parts at once: they become one part, which Amdahl replaces."""
    unknown = sorted(set(set_ms) - set(parts_ms))
    if unknown or not set_ms:
        raise ValueError(f"set_ms names no part {unknown[0]!r}" if unknown else "set_ms names no part")
    joined = " + ".join(set_ms)
    merged = {name: ms for name, ms in parts_ms.items() if name not in set_ms}
    merged[joined] = sum(parts_ms[name] for name in set_ms)
    return amdahl(merged, joined, sum(set_ms.values()))


def _workload(data: dict[str, Any]):
    try:
        return Workload.model_validate(data)
    except ValidationError as err:
        raise ValueError(validation_message(err, "workload")) from None


def bound(**workload: Any):
    """The per-rank bound of a pinned workload, as `diagnoser bound` computes it."""
    return compute_bound(_workload(workload))


class BatchAt(BaseModel):
    """The batching estimate, with its points keyed by batch so a field reads ``at.32.aggregate_tokens_per_s``."""

    estimate: Any
    at: dict[str, Any]


def batch(workload: dict[str, Any], sizes: list[int]) -> BatchAt:
    """What `diagnoser whatif batch` estimates: the bound's floor at each size, the measured overhead kept."""
    estimate = batch_estimate(_workload(workload), sizes, "workload")
    return BatchAt(estimate=estimate, at={str(p.batch): p for p in estimate.points})


def rate_at_step(step_ms: float, batch: int = 1, tokens_per_step: float = 1.0) -> dict[str, float]:
    """The rate of ``batch`` sequences decoding in one step of ``step_ms``: the ceiling formula at that step."""
    if step_ms <= 0:
        raise ValueError("the step must be > 0")
    at = compare_with_observation(step_ms, batch=batch, tokens_per_step=tokens_per_step)
    return {"aggregate_tokens_per_s": at.ceiling_tokens_per_s, "per_user_tokens_per_s": at.per_user_ceiling_tokens_per_s}


def step_from_rate(tokens_per_s: float, batch: int = 1, tokens_per_step: float = 1.0) -> dict[str, float]:
    """A rate back to the interval between steps."""
    if tokens_per_s <= 0:
        raise ValueError("the rate must be > 0")
    return {"step_ms": step_ms_from_rate(tokens_per_s, batch, tokens_per_step)}


def _console_text(render: Callable[..., None], *args: Any) -> list[str]:
    """What a rich renderer of the CLI prints, as plain lines."""
    console = Console(file=io.StringIO(), width=400, color_system=None, highlight=False)
    render(*args, console)
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def _floor_lines(inputs: dict[str, Any], result: Any) -> list[str]:
    return _console_text(render_floor, result, float(inputs["bytes_per_step"]), float(inputs["bandwidth_gbs"]))


def _bound_lines(inputs: dict[str, Any], report: Any) -> list[str]:
    critical = next(r for r in report.per_rank if r.rank == report.critical_rank)
    lines = [
        f"{report.model} on {report.hardware}, batch {report.batch}, TP={report.layout.tp} EP={report.layout.ep}: "
        f"the busiest rank ({report.critical_rank}) moves {critical.bytes_total / GB:.4g} GB per step "
        f"-> step floor {report.step_floor_ms:.4g} ms",
        f"'active parameters x bytes': {report.naive.bytes_per_rank / GB:.4g} GB per rank -> {report.naive.floor_ms:.4g} ms",
    ]
    union = report.expert_union
    if union is not None:
        lines.append(
            f"experts touched per MoE layer on that rank: {union.touched_per_layer_busiest_rank:.4g} of {union.local_experts:.4g} "
            f"for {union.group_tokens:.4g} tokens ({union.source}); 'active parameters' would say {union.touched_per_layer_if_active_params:.4g}"
        )
    return lines + [f"sanity: {line}" for line in report.sanity]


def _text_lines(render: Callable[[Any], str]) -> Callable[[dict[str, Any], Any], list[str]]:
    return lambda inputs, result: render(result).splitlines()


def _batch_lines(inputs: dict[str, Any], result: BatchAt) -> list[str]:
    return render_batch(result.estimate).splitlines()


def _ranks_lines(inputs: dict[str, Any], result: RanksStep) -> list[str]:
    per_rank = [
        f"rank {rank}: {' + '.join(f'{v:.4g}' for v in inputs['ranks_parts_ms'][rank].values())} = {ms:.4g} ms"
        for rank, ms in result.ranks_ms.items()
    ]
    return per_rank + [
        f"step = the slowest rank ({result.slowest_rank}) = {result.step_ms:.4g} ms; "
        f"{result.summed_ms:.4g} ms over all ranks is a resource total, not elapsed time"
    ]


def _rate_at_step_lines(inputs: dict[str, Any], result: dict[str, float]) -> list[str]:
    batch = inputs.get("batch", 1)
    return [
        f"aggregate = batch {batch} x {inputs.get('tokens_per_step', 1.0):g} tokens per step / {float(inputs['step_ms']):.4g} ms "
        f"= {result['aggregate_tokens_per_s']:.4g} tokens/s ({result['per_user_tokens_per_s']:.4g} per sequence)"
    ]


def _rate_lines(inputs: dict[str, Any], result: dict[str, float]) -> list[str]:
    return [
        f"step = batch {inputs.get('batch', 1)} x {inputs.get('tokens_per_step', 1.0):g} tokens per step / "
        f"{float(inputs['tokens_per_s']):.4g} tokens/s = {result['step_ms']:.4g} ms"
    ]


@dataclass(frozen=True)
class Calculator:
    function: Callable[..., Any]
    worked: Callable[[dict[str, Any], Any], list[str]]


CALCULATORS: dict[str, Calculator] = {
    "floor": Calculator(floor_from_bytes, _floor_lines),
    "bound": Calculator(bound, _bound_lines),
    "amdahl": Calculator(amdahl, _text_lines(render_amdahl)),
    "amdahl_several": Calculator(amdahl_several, _text_lines(render_amdahl)),
    "speculation": Calculator(speculation, _text_lines(render_speculation)),
    "batch": Calculator(batch, _batch_lines),
    "rate_at_step": Calculator(rate_at_step, _rate_at_step_lines),
    "ranks_step": Calculator(ranks_step, _ranks_lines),
    "step_from_rate": Calculator(step_from_rate, _rate_lines),
}


def calculate(name: str, inputs: dict[str, Any]) -> tuple[Any, list[str]]:
    """Run a calculator on inputs already resolved to plain values: its result and its working.

    Inputs are validated against the calculator's signature, so a misspelt input or a string
    where a number belongs is one line naming it, not a TypeError deep inside.
    """
    calc = CALCULATORS.get(name)
    if calc is None:
        raise InputError(f"unknown calculator {name!r} (known: {', '.join(sorted(CALCULATORS))})")
    _refuse_non_finite(name, "an input", inputs)
    try:
        result = validate_call(calc.function)(**inputs)
    except ArithmeticError:  # a denormal rate divides to infinity, a zero step by zero
        raise InputError(f"calculator {name}: its inputs give no finite figure (a zero, denormal or huge number)") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"calculator {name}: input {where}: {first['msg']}") from None
    except (ValueError, InputError) as err:
        raise InputError(f"calculator {name}: {str(err).splitlines()[0]}") from None
    _refuse_non_finite(name, "its result", result.model_dump() if isinstance(result, BaseModel) else result)
    return result, calc.worked(inputs, result)


def _refuse_non_finite(name: str, what: str, value: Any) -> None:
    """A figure a trainee is scored against must be a number: ``inf ms`` accepts every answer."""
    if isinstance(value, dict):
        for item in value.values():
            _refuse_non_finite(name, what, item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _refuse_non_finite(name, what, item)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"calculator {name}: {what} is not a finite number (a zero, denormal or huge input?)")


def read_field(result: Any, path: str) -> float:
    """The number at a dotted path of a calculator's result (models, mappings, lists by index)."""
    value: Any = result.model_dump() if isinstance(result, BaseModel) else result
    for part in path.split("."):
        if isinstance(value, BaseModel):
            value = value.model_dump()
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            known = ", ".join(sorted(str(k) for k in value)) if isinstance(value, dict) else type(value).__name__
            raise InputError(f"field {path!r}: no {part!r} in the result (there: {known})")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"field {path!r} is not a number ({value!r})")
    return float(value)
