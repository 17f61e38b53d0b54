"""What a diagnosis says: hypotheses a senior engineer would stand behind, and how to test them.

A hypothesis is worth acting on only with its evidence, a check that could prove it wrong,
an upper bound on what fixing it can buy, and a rule for when to take the fix back out.
Renderers and the TUI read these models; they never recompute anything.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from diagnoser.whatif import BoundedGain

DIAGNOSIS_SCHEMA_VERSION = 1


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Kind(str, Enum):
    """Ranked in this order: causes carry a gain; the rest correct or complete the reasoning."""

    cause = "cause"  # a candidate explanation with evidence and a bounded gain
    guard = "guard"  # the inputs contain a known reasoning mistake
    lesson = "lesson"  # a follow-up question the case raises, with the answer that applies
    check = "check"  # nothing can be concluded yet: what to measure next


KIND_ORDER = {Kind.cause: 0, Kind.guard: 1, Kind.check: 2, Kind.lesson: 3}


class Grade(str, Enum):
    """How far the evidence carries a cause; causes rank by grade before gain.

    ``measured``: the time it claims was measured (a budget part, a kernel class's share of a
    measured step, an A/B delta that isolates it, a probe). ``indicated``: a configuration or
    symptom fact this cause produces and few others do; its gain is not bounded until the
    named measurement is made. ``possible``: consistent with the symptoms, not discriminated.
    """

    measured = "measured"
    indicated = "indicated"
    possible = "possible"


GRADE_ORDER = {Grade.measured: 0, Grade.indicated: 1, Grade.possible: 2}


class Evidence(_Out):
    name: str = Field(description="the observation, e.g. budget.launch_ms")
    value: float | int | str | bool | None
    unit: str = ""


class Check(_Out):
    """The measurement that tells this hypothesis apart from its neighbours."""

    measure: str
    confirms: str
    refutes: str


class Remedy(_Out):
    action: str
    cost: str
    risk: str
    share: float = Field(default=1.0, ge=0, le=1, description="part of the removable time this remedy can address")
    predicted_step_ms: float | None = None
    predicted_speedup: float | None = None


class UndoMetric(str, Enum):
    per_user_latency = "per_user_latency"
    p99_itl = "p99_itl"
    quality = "quality"
    memory_kv_capacity = "memory_kv_capacity"
    useful_throughput = "useful_throughput"


class UndoCriterion(_Out):
    metric: UndoMetric
    revert_if: str


class Hypothesis(_Out):
    id: str = Field(description="rule id, plus ':key' when one rule fires for several facts")
    rule: str
    kind: Kind
    title: str
    explanation: str
    evidence: list[Evidence] = Field(default_factory=list)
    check: Check | None = None
    gain: BoundedGain | None = None
    remedies: list[Remedy] = Field(default_factory=list)
    undo: list[UndoCriterion] = Field(default_factory=list)
    parent: str | None = None
    refines: list[str] = Field(default_factory=list, description="other broader causes whose time this one can locate")
    follows_from: list[str] = Field(default_factory=list, description="upstream causes that bring this one about where they hold")
    missing: list[str] = Field(default_factory=list, description="inputs that would let more rules evaluate")
    grade: Grade | None = Field(default=None, description="causes only: measured, indicated or possible")
    claimed_ms: float | None = Field(
        default=None, description="the measured time a measured cause claims, also when no reference step turns it into a gain"
    )
    bounded_by: list[str] = Field(
        default_factory=list, description="an unbounded cause: the inputs whose measurement would bound its gain"
    )
    implied_by: str | None = Field(default=None, description="a parent named only because this refinement holds")
    at_least: bool = Field(
        default=False, description="the measured time is a floor: the mechanism also costs inside the figure it was measured against"
    )
    leads: bool = Field(default=False, description="a guard that invalidates the comparison; ranks before every cause")
    locates: bool = Field(
        default=False, description="says where the time went (a changed setting), not what spends it; ranks after the mechanisms"
    )


class Question(_Out):
    """A fact the case lacks, ranked by how much it would settle among the open hypotheses."""

    input: str = Field(description="the case input it supplies, e.g. budget")
    label: str
    how: str = Field(description="the command or measurement that answers it")
    score: float = Field(ge=0, description="open hypotheses it would bound, plus rules it would let evaluate, weighted")
    would_bound: list[str] = Field(default_factory=list, description="hypotheses whose gain it would bound or refute")
    would_evaluate: list[str] = Field(
        default_factory=list, description="cause rules that cannot evaluate without it, or rules that judge by a bound lacking it"
    )


class RuleError(_Out):
    rule: str
    error: str


class BoundSummary(_Out):
    source: str = Field(description="compute_bound (workload) or floor_from_bytes (bound_inputs)")
    floor_ms: float = Field(description="the step floor: the larger of the memory-only and compute floors, summed over pipeline stages")
    limited_by: str = Field(default="memory", description="memory or compute: which floor sets the step floor")
    observed_step_ms: float | None = Field(default=None, description="the measured step the floor is compared with")
    unexplained_ms: float | None = Field(default=None, description="observed step minus floor: time the bound does not account for")
    fraction_of_ceiling: float | None = Field(default=None, description="observed rate / the optimistic ceiling")
    ceiling_tokens_per_s: float | None = Field(default=None, description="the rate at the floor")
    critical_rank_bytes: float | None = Field(default=None, description="bytes the busiest rank moves per step")
    active_parameter_bytes: float | None = Field(default=None, description="the naive active params x bytes figure")
    bandwidth_gbs: float | None = Field(default=None, description="bandwidth the bound used (datasheet or measured)")
    expert_bytes: float | None = Field(default=None, description="routed + shared expert bytes the busiest rank reads per step")
    rows_per_touched_expert: float | None = Field(default=None, description="mean tokens per expert GEMM in the pinned batch")
    resident_share: float | None = Field(
        default=None, description="weights and KV cache the fullest rank holds at the pinned batch and context, over one device's memory"
    )
    weights_share: float | None = Field(default=None, description="the fullest rank's weights alone, over one device's memory")
    sanity: list[str] = Field(default_factory=list)
    lacks: list[str] = Field(default_factory=list, description="inputs the pin did not give and the floor did without")
    notes: list[str] = Field(
        default_factory=list, description="what to settle before trusting the floor: a missing input, a pin that does not fit"
    )


class Diagnosis(_Out):
    schema_version: int = DIAGNOSIS_SCHEMA_VERSION
    title: str = ""
    reference_step_ms: float | None = Field(default=None, description="the step every gain is a share of")
    bound: BoundSummary | None = None
    hypotheses: list[Hypothesis] = Field(default_factory=list)
    rule_errors: list[RuleError] = Field(default_factory=list)
    questions: list[Question] = Field(default_factory=list, description="the next facts to gather, best first")
    bound_note: str | None = Field(default=None, description="why no bound was computed, when the pin is incomplete")
    notes: list[str] = Field(
        default_factory=list, description="evidence the case holds that no rule could use, and why (an expected figure with nothing of its kind to compare)"
    )
    rules_loaded: int = 0
    thresholds_changed: dict[str, list[float]] = Field(
        default_factory=dict, description="MODULE.NAME -> [value in the rules, value used for this run]"
    )

    def of_kind(self, kind: Kind) -> list[Hypothesis]:
        return [h for h in self.hypotheses if h.kind == kind]
