"""What-if calculators: bound one change before promising it.

Pure functions over numbers the user measured. They answer "at most how much faster", which
is the question to settle before any tuning work: a change can only remove the part of the
step it touches (Amdahl), speculation pays for every cycle whether drafts are accepted or
not, and a bigger batch reuses weight reads but grows the expert union and the KV traffic.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field


# What each model assumes, carried in its result so every format states it next to the figure.
AMDAHL_ASSUMPTIONS = (
    "the parts are non-overlapping pieces of one serial step, measured on the critical rank",
    "a change removes only the part it replaces: waiting on a dependency, another rank or the client needs another remedy",
    "rate = one emitted token per step for one stream; re-test the whole service before promising it",
)
SPECULATION_ASSUMPTIONS = (
    "each draft token is accepted with the same probability a once the ones before it were; k drafts, "
    "one correction or bonus token per cycle: a model of accepted-prefix length, not of every decoder "
    "or of an averaged acceptance counter",
    "drafting, verification and other work do not overlap; measure accepted output, draft cost, "
    "verification cost and extra memory together (fewer target calls alone is no win)",
    "acceptance and costs move with load and with the prompts: measure them at the served workload",
)
BATCH_ASSUMPTIONS = (
    "step = the bound's floor at that batch + the time above the floor measured at the current batch, assumed unchanged",
    "aggregate rate = batch x tokens per step / step for ordinary decode; the expert union, KV reads and compute "
    "grow with the batch, so the step is not fixed",
    "per-user latency need not follow this curve: test at the service's concurrency, and keep single-stream "
    "figures for quiet periods and freshly started replicas",
)


class AmdahlResult(BaseModel):
    parts_ms: dict[str, float]
    parts_after_ms: dict[str, float]
    changed_part: str
    before_ms: float
    after_ms: float
    saved_ms: float
    speedup: float
    assumptions: list[str] = Field(default_factory=lambda: list(AMDAHL_ASSUMPTIONS))


class BoundedGain(BaseModel):
    """The most a change can take off a step, after every cap is applied."""

    step_ms: float
    removable_ms: float
    after_ms: float
    speedup: float
    capped_by: str | None = None
    share_of_step: float = Field(default=0.0, description="removable_ms / step_ms")
    over_ms: float | None = Field(default=None, description="the reference step this time comes on top of (step_ms is their sum)")
    stream_step_ms: float | None = Field(
        default=None, description="the longer step a stream sees (time on top of this reference step), on which causes were ranked"
    )
    stream_speedup: float | None = Field(default=None, description="the speed-up removable_ms gives on stream_step_ms")


class SpeculationResult(BaseModel):
    acceptance: float
    draft_length: int
    expected_tokens_per_cycle: float
    cycle_ms: float
    ordinary_step_ms: float
    ms_per_token: float
    speedup: float
    is_slowdown: bool
    assumptions: list[str] = Field(default_factory=lambda: list(SPECULATION_ASSUMPTIONS))


class BatchPoint(BaseModel):
    batch: int
    floor_ms: float
    step_ms: float
    aggregate_tokens_per_s: float
    per_user_tokens_per_s: float


class BatchLimit(BaseModel):
    """The first batch asked for whose weights and KV cache do not fit in one rank's HBM."""

    batch: int
    needed_gib: float = Field(description="weights + KV cache on the fullest rank, GiB")
    weights_gib: float
    kv_gib: float
    capacity_gib: float = Field(description="HBM of one device, GiB")
    left_out: str = Field(description="what the capacity check does not count")


class BatchEstimate(BaseModel):
    """The curve up to the last batch that fits, and the batch that stopped it."""

    points: list[BatchPoint]
    does_not_fit: BatchLimit | None = None
    notes: list[str] = Field(default_factory=list)
    assumptions: list[str] = Field(default_factory=lambda: list(BATCH_ASSUMPTIONS))


def amdahl(parts_ms: dict[str, float], part: str, new_ms: float) -> AmdahlResult:
    """Replace one non-overlapping part of a serial step and recompute the step."""
    if part not in parts_ms:
        raise ValueError(f"no part named {part!r}; parts are {', '.join(parts_ms)}")
    if new_ms < 0 or any(v < 0 for v in parts_ms.values()):
        raise ValueError("part times must be >= 0")
    before = sum(parts_ms.values())
    after = before - parts_ms[part] + new_ms
    if not (0 < before < math.inf and 0 < after < math.inf):
        raise ValueError("the step must stay longer than zero and finite")
    return AmdahlResult(
        parts_ms=dict(parts_ms),
        parts_after_ms={**parts_ms, part: new_ms},
        changed_part=part,
        before_ms=before,
        after_ms=after,
        saved_ms=before - after,
        speedup=before / after,
    )


def bounded_gain(
    step_ms: float, removable_ms: float, cap_ms: float | None = None, cap_name: str | None = None
) -> BoundedGain:
    """Amdahl for one hypothesis: what it may remove, never more than its parent or the step."""
    removable = max(0.0, removable_ms)
    capped_by = None
    if cap_ms is not None and removable > cap_ms:
        removable, capped_by = max(0.0, cap_ms), cap_name
    # A cause cannot remove the whole step; leave the step at least its remaining work.
    removable = min(removable, step_ms * 0.999)
    after = step_ms - removable
    return BoundedGain(
        step_ms=step_ms,
        removable_ms=removable,
        after_ms=after,
        speedup=step_ms / after,
        capped_by=capped_by,
        share_of_step=removable / step_ms,
    )


def expected_tokens_per_cycle(acceptance: float, draft_length: int) -> float:
    """E = 1 + a + ... + a^k under a constant conditional acceptance a (one bonus/correction token)."""
    if not 0 <= acceptance <= 1:
        raise ValueError("acceptance must be within [0, 1]")
    if draft_length < 1:
        raise ValueError("draft length must be >= 1")
    if acceptance == 1:
        return float(draft_length + 1)
    return (1 - acceptance ** (draft_length + 1)) / (1 - acceptance)


def acceptance_from_rate(rate: float, draft_length: int) -> float:
    """The constant conditional acceptance a under which a cycle of k drafts keeps the share ``rate`` of them
    (what the counters measure: accepted over drafted tokens), so the yield at another draft length can be read from
    one measured length: later drafts are kept less often, and the share falls as k grows."""
    if not 0 <= rate <= 1:
        raise ValueError("acceptance rate must be within [0, 1]")
    if rate == 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: the kept share rises with a; 60 halvings are below float resolution
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (expected_tokens_per_cycle(mid, draft_length) - 1) / draft_length < rate else (lo, mid)
    return (lo + hi) / 2


def speculation(
    acceptance: float,
    draft_length: int,
    verify_ms: float,
    draft_ms: float,
    other_ms: float,
    ordinary_step_ms: float,
) -> SpeculationResult:
    """Speed-up of draft-and-verify against ordinary one-token decode, costs not overlapped."""
    if min(verify_ms, draft_ms, other_ms) < 0 or ordinary_step_ms <= 0:
        raise ValueError("cycle costs must be >= 0 and the ordinary step > 0")
    cycle = verify_ms + draft_ms + other_ms
    if cycle <= 0:
        raise ValueError("a speculation cycle must cost some time")
    tokens = expected_tokens_per_cycle(acceptance, draft_length)
    speedup = tokens * ordinary_step_ms / cycle
    return SpeculationResult(
        acceptance=acceptance,
        draft_length=draft_length,
        expected_tokens_per_cycle=tokens,
        cycle_ms=cycle,
        ordinary_step_ms=ordinary_step_ms,
        ms_per_token=cycle / tokens,
        speedup=speedup,
        is_slowdown=speedup < 1,
    )


def batch_curve(
    floors_ms: dict[int, float], base_batch: int, base_step_ms: float, tokens_per_step: float = 1.0
) -> list[BatchPoint]:
    """Re-estimate the step at other batch sizes from how the bound's floor moves.

    The time above the floor at the measured batch (launches, host work, exposed
    communication) is assumed unchanged; only the floor grows with the expert union and KV
    reads. That keeps the estimate anchored to a measurement instead of to the spreadsheet.
    """
    if base_batch not in floors_ms:
        raise ValueError(f"the floor at the measured batch {base_batch} is needed")
    if base_step_ms <= 0:
        raise ValueError("the measured step must be > 0")
    overhead = max(0.0, base_step_ms - floors_ms[base_batch])
    points = []
    for batch in sorted(floors_ms):
        step = floors_ms[batch] + overhead
        points.append(
            BatchPoint(
                batch=batch,
                floor_ms=floors_ms[batch],
                step_ms=step,
                aggregate_tokens_per_s=batch * tokens_per_step / step * 1e3,
                per_user_tokens_per_s=tokens_per_step / step * 1e3,
            )
        )
    return points
