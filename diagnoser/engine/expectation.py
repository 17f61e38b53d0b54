"""Whether the figure a slow run was held against meets an observation of its own kind.

An expected figure is evidence only beside something that measured the same quantity: a
per-token time or one stream's rate beside a per-token observation, an aggregate rate beside an
aggregate, a job's wall time beside a wall time, each read at the same boundary (or at one not
stated, which the boundary guard takes up). The rules compare what they can; a figure with
nothing of its kind in the case would otherwise vanish from the report without a word.
"""

from __future__ import annotations

from diagnoser.models.case import Case
from diagnoser.models.serving import Expected, RateKind

PER_TOKEN, AGGREGATE, WALL_TIME = "per-token", "aggregate", "wall-time"

# What an observation of each kind is, as the note names it.
OBSERVATION = {
    PER_TOKEN: "per-token time or per-stream rate (TPOT, ITL, a step time)",
    AGGREGATE: "aggregate tokens/s",
    WALL_TIME: "wall time of the same job",
}
UNKNOWN = "unknown"


def figure_kind(expected: Expected, field: str) -> str:
    """The kind of an expected figure; a stated rate kind wins over the field a tokens/s was written in."""
    if field == "duration_s":
        return WALL_TIME
    if field == "per_token_ms":
        return PER_TOKEN
    if expected.rate is not RateKind.unknown:
        return PER_TOKEN if expected.rate is RateKind.per_user else AGGREGATE
    return AGGREGATE if field == "output_tokens_per_s" else PER_TOKEN


def observed_kinds(case: Case) -> dict[str, set[str]]:
    """Each kind of figure the case measured, with the boundaries it was read at."""
    found: dict[str, set[str]] = {PER_TOKEN: set(), AGGREGATE: set(), WALL_TIME: set()}
    obs = case.observations

    def add(kind: str, boundary: str, value: object) -> None:
        if value is not None:
            found[kind].add(boundary)

    if obs.metrics is not None:
        m, at = obs.metrics, obs.metrics.boundary.value
        add(PER_TOKEN, at, m.per_token_ms())
        add(AGGREGATE, at, m.output_tokens_per_s)
        add(WALL_TIME, at, m.duration_s)
    for run in obs.runs:
        f, at = run.figures, run.boundary.value
        add(PER_TOKEN, at, f.per_token_ms or f.per_user_tokens_per_s)
        add(AGGREGATE, at, f.output_tokens_per_s)
        add(WALL_TIME, at, f.duration_s)
    if obs.budget is not None:
        add(PER_TOKEN, "device_step", obs.budget.step_ms)
    if obs.boundaries is not None:
        b = obs.boundaries
        for at, value in (("device_step", b.device_step_ms), ("server_emission", b.server_emission_ms), ("client_receipt", b.client_receipt_ms)):
            add(PER_TOKEN, at, value)
    observed = case.workload.observed if case.workload is not None else None
    if observed is not None:
        add(PER_TOKEN, observed.boundary.value, observed.step_ms)
        add(AGGREGATE, observed.boundary.value, observed.tokens_per_s)
    return found


def uncompared_expected(case: Case) -> list[str]:
    """One line for each expected figure with no observation of its kind at its boundary."""
    expected = case.observations.expected
    if expected is None:
        return []
    seen = observed_kinds(case)
    lines = []
    for field in ("per_token_ms", "per_user_tokens_per_s", "output_tokens_per_s", "duration_s"):
        value = getattr(expected, field)
        if value is None:
            continue
        kind = figure_kind(expected, field)
        at = seen[kind]
        figure = f"expected.{field} = {value:g} is compared with nothing"
        if not at:
            lines.append(f"{figure}: the case holds no {OBSERVATION[kind]} to set it against")
        elif expected.boundary.value != UNKNOWN and UNKNOWN not in at and expected.boundary.value not in at:
            lines.append(
                f"{figure}: it was read at {expected.boundary.value}, the case's {OBSERVATION[kind]} only at {', '.join(sorted(at))}"
            )
    return lines
