"""From bytes and bandwidth to a floor, a ceiling, and how much of an observation they explain.

The floor is a lower bound on step time from memory traffic alone. Comparing it with an
observed step says how many milliseconds are *unexplained*; it never says why.
"""

from __future__ import annotations

from pydantic import BaseModel

from diagnoser.models.workload import Boundary


class FloorResult(BaseModel):
    """A floor and what it says about an observation; ``floor_ms`` is memory traffic alone."""

    floor_ms: float
    ceiling_tokens_per_s: float
    per_user_ceiling_tokens_per_s: float
    observed_step_ms: float | None = None
    observed_tokens_per_s: float | None = None
    fraction_of_ceiling: float | None = None
    unexplained_ms: float | None = None
    boundary: Boundary = Boundary.device_step
    sanity: list[str] = []


# Under half of the optimistic ceiling is "low": most of the step is not the bytes the bound counts.
LOW_FRACTION = 0.5


def step_ms_from_rate(tokens_per_s: float, batch: int, tokens_per_step: float) -> float:
    """Aggregate emitted tokens/s back to a step time: B sequences emit B*t tokens per step."""
    return batch * tokens_per_step / tokens_per_s * 1e3


def compare_with_observation(
    floor_ms: float,
    *,
    batch: int = 1,
    tokens_per_step: float = 1.0,
    observed_step_ms: float | None = None,
    observed_tokens_per_s: float | None = None,
    boundary: Boundary = Boundary.device_step,
) -> FloorResult:
    """Ceiling from a floor, and the share of an observed step it accounts for."""
    if floor_ms <= 0:
        raise ValueError("floor must be positive")
    ceiling = batch * tokens_per_step / (floor_ms / 1e3)
    result = FloorResult(
        floor_ms=floor_ms,
        ceiling_tokens_per_s=ceiling,
        per_user_ceiling_tokens_per_s=tokens_per_step / (floor_ms / 1e3),
        boundary=boundary,
    )
    if observed_step_ms is None and observed_tokens_per_s is not None:
        observed_step_ms = step_ms_from_rate(observed_tokens_per_s, batch, tokens_per_step)
    if observed_step_ms is None:
        return result
    rate = observed_tokens_per_s or batch * tokens_per_step / (observed_step_ms / 1e3)
    unexplained = max(observed_step_ms - floor_ms, 0.0)
    sanity = [
        f"the floor explains {_fmt(floor_ms)} of {_fmt(observed_step_ms)} ms per step; "
        f"the other {_fmt(unexplained)} ms are unexplained, not yet attributed to any cause",
    ]
    if rate / ceiling < LOW_FRACTION:
        sanity.append(
            "a low fraction of the ceiling is not a diagnosis, and there is no universal 'normal' fraction: "
            "attribute the step with a trace before choosing a fix"
        )
    if observed_step_ms < floor_ms:
        sanity.insert(0, "the observation is FASTER than the floor: the bound counts bytes the step does not move "
                         "(check precision, expert union, context, or a bandwidth figure that is too low)")
    if boundary is not Boundary.device_step:
        sanity.append(
            f"the observation was taken at {boundary.value.replace('_', ' ')}; it includes scheduling, sampling, "
            "detokenization and transport that the bound leaves out: measure the device step too before blaming kernels"
        )
    return result.model_copy(
        update=dict(
            observed_step_ms=observed_step_ms,
            observed_tokens_per_s=rate,
            fraction_of_ceiling=rate / ceiling,
            unexplained_ms=unexplained,
            sanity=sanity,
        )
    )


def floor_from_bytes(
    bytes_per_step: float,
    bandwidth_gbs: float,
    tokens_per_step: float = 1.0,
    batch: int = 1,
    observed_step_ms: float | None = None,
    observed_tokens_per_s: float | None = None,
    boundary: Boundary = Boundary.device_step,
) -> FloorResult:
    """The single-rank memory-only floor: bytes / bandwidth (GB = 1e9 bytes)."""
    if bytes_per_step <= 0 or bandwidth_gbs <= 0:
        raise ValueError("bytes per step and bandwidth must be positive")
    return compare_with_observation(
        bytes_per_step / (bandwidth_gbs * 1e9) * 1e3,
        batch=batch,
        tokens_per_step=tokens_per_step,
        observed_step_ms=observed_step_ms,
        observed_tokens_per_s=observed_tokens_per_s,
        boundary=boundary,
    )


def _fmt(ms: float) -> str:
    return f"{ms:.3g}"
