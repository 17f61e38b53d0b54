"""How a rule is written: static metadata (``RuleSpec``), experta patterns, and a small body.

The spec holds everything a reviewer reads without running anything: what the cause is,
which inputs it needs, the check that would refute it, the remedies and when to undo them.
The body only turns matched values into a ``Finding`` (evidence and the time at stake); the
engine does the Amdahl bound, the parent cap, error isolation and ranking, so no rule can
forget them.
"""

from __future__ import annotations

import functools
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from diagnoser.engine.facts import Holds, Unevaluable
from diagnoser.engine.limits import RULE_TIME_LIMIT_S, RuleTimeout, time_limit
from diagnoser.engine.overrides import rebind
from diagnoser.errors import InputError
from diagnoser.experta_compat import AND, ANDFC, MATCH, NOT, NOTFC, OR, ORFC, TEST, Fact, P, Rule
from diagnoser.models.hypothesis import Check, Evidence, Grade, Kind, RuleError, UndoCriterion, UndoMetric
from diagnoser.models.documents import load_document, validation_message
from diagnoser.models.model_spec import ModelFeature

# Names under which a child rule receives its parent's cap and step; reserved for the engine.
PARENT_CAP = "parent_cap_ms"
PARENT_STEP = "parent_step_ms"


class RemedySpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    action: str
    cost: str
    risk: str
    share: float = Field(default=1.0, ge=0, le=1, description="part of the removable time it can address")


class ThresholdSpec(BaseModel):
    """A cut-off a rule reads: its value, unit and the reason for that value."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    value: float
    unit: str = Field(default="", description="ms, fraction, x (a ratio), ...")
    why: str = Field(min_length=1, description="why this value: what falls on either side of it")


class RuleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    title: str
    kind: Kind = Kind.cause
    parent: str | None = Field(default=None, description="refine only when this cause holds; gain capped by it")
    refines: tuple[str, ...] = Field(
        default=(),
        description="other broader causes whose time this one can locate (no matching, no cap): measured and accounting for "
        "at least half of one's measured time, it ranks just ahead of it, as a refinement does of its parent",
    )
    follows_from: tuple[str, ...] = Field(
        default=(),
        description="upstream causes that can bring this one about (GPUs without peer access get no custom all-reduce): a "
        "finding that says it is their consequence never ranks ahead of one that concluded, since removing that cause removes it",
    )
    requires: tuple[str, ...] = Field(default=(), description="inputs (see engine.facts.INPUTS) it cannot evaluate without")
    report_missing: bool = Field(default=True, description="list a required input among the next questions when absent")
    grade: Grade = Field(
        default=Grade.indicated,
        description="the grade its evidence supports when the finding claims no measured time (a measured time is 'measured')",
    )
    bounded_by: tuple[str, ...] = Field(
        default=(), description="inputs that would bound it when it fires without a measured time (default: its parent's requires)"
    )
    leads: bool = Field(
        default=False,
        description="a guard that invalidates the comparison: ranks before every cause when the case compares the figure with "
        "something (an expected figure, a bound, runs); with nothing to void, it ranks as an ordinary guard after the causes",
    )
    compares_itself: bool = Field(
        default=False,
        description="a leading guard whose finding holds both sides of the comparison it voids (chunk gaps against token "
        "times, the client's figures against the server's): it leads whatever else the case compares",
    )
    aliases: tuple[str, ...] = Field(
        default=(), description="ids this rule had before a rename: sessions, packs and notes that name them still find it"
    )
    thresholds: dict[str, ThresholdSpec] = Field(
        default_factory=dict, description="cut-offs a YAML-only rule's condition names (UPPER_CASE), with unit and why"
    )
    applies: ModelFeature | None = Field(
        default=None,
        description="the model part it is about (moe: routed experts); with a pinned model that lacks it, no next question names it",
    )
    locates: bool = Field(
        default=False,
        description="a cause that says where the time went (a setting, a version), not what spends it: ranks after the mechanisms",
    )
    explanation: str
    check: Check | None = None
    remedies: tuple[RemedySpec, ...] = ()
    undo: tuple[UndoCriterion, ...] = ()


@dataclass
class Finding:
    """What a rule body returns when its conclusion holds for the matched facts."""

    evidence: list[Evidence]
    removable_ms: float | None = None
    step_ms: float | None = None  # when the time is at another boundary than the reference step
    # The time comes on top of the reference step: a stream waits out both (a prefill in its step, a stall
    # between two steps). The gain is on their sum, and causes measured on the reference step are ranked
    # against it on that sum, the time per token the stream sees.
    on_top: bool = False
    detail: str = ""
    key: str = ""  # tells apart several firings of one rule (one per collective, ...)
    missing: list[str] = field(default_factory=list)
    grade: Grade | None = None  # default: measured with a removable time, else the spec's grade
    # The measured time is a floor: the mechanism also costs inside the figure it was measured against (a step timed
    # with it on), so its share of a broader cause's time may be larger than measured.
    at_least: bool = False
    # This firing is what the spec's ``follows_from`` causes bring about (the custom all-reduce off because the GPUs
    # have no peer access), not a choice of its own: it ranks behind whichever of them concluded.
    consequence: bool = False


def load_specs(module_file: str | Path) -> dict[str, RuleSpec]:
    """A rule module's specs, kept beside it as reviewable data (``launch.py`` -> ``launch.yaml``).

    The YAML maps rule id -> spec fields; reviewers can read and change the claims, checks,
    remedies and undo criteria without reading any matching code.
    """
    path = Path(module_file).with_suffix(".yaml")
    data = load_document(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of rule id -> spec")
    specs = {}
    for rule_id, fields in data.items():
        if not isinstance(fields, dict):
            raise InputError(f"{path}: {rule_id}: expected a mapping of spec fields")
        try:
            specs[rule_id] = RuleSpec.model_validate({"id": rule_id, **fields})
        except ValidationError as err:
            raise InputError(validation_message(err, f"{path}: {rule_id}")) from None
    return specs


def ev(name: str, value: Any, unit: str = "") -> Evidence:
    if isinstance(value, float):
        value = round(value, 4)
    return Evidence(name=name, value=value, unit=unit)


def undo(metric: str, revert_if: str) -> UndoCriterion:
    return UndoCriterion(metric=UndoMetric(metric), revert_if=revert_if)


class RuleSet:
    """Base of every rule module's class; the engine mixes all of them into one KnowledgeEngine."""


# Errors raised inside TEST conditions while an engine matches; None when no engine is running.
test_errors: ContextVar[list[RuleError] | None] = ContextVar("test_errors", default=None)


def _fail_closed(check: Callable[..., Any], rule_id: str, where: str) -> Callable[..., Any]:
    """A condition that fails closed: experta calls TESTs and field predicates while it matches,
    outside any rule body, so one that raises would otherwise abort the whole diagnosis. The
    error is kept for the report."""

    @functools.wraps(check)  # experta reads a TEST's parameter names through __wrapped__
    def guarded(*args: Any, **bindings: Any) -> Any:
        try:
            with time_limit(RULE_TIME_LIMIT_S, f"a {where}"):
                return check(*args, **bindings)
        except (Exception, RuleTimeout, SystemExit) as err:  # noqa: BLE001 - one broken rule must not sink the diagnosis
            sink = test_errors.get()
            if sink is not None:
                sink.append(RuleError(rule=rule_id, error=f"{type(err).__name__} in a {where}: {err}"))
            return False

    return guarded


def _guard_conditions(element: Any, rule_id: str) -> Any:
    """The same pattern with every TEST and field predicate made to fail closed."""
    if isinstance(element, TEST):
        return TEST(_fail_closed(rebind(element[0], rule_id), rule_id, "TEST"))
    if isinstance(element, P):
        return P(_fail_closed(rebind(element.match, rule_id), rule_id, "field predicate"), element.__bind__)
    if isinstance(element, (AND, OR, NOT, ANDFC, ORFC, NOTFC)):
        return type(element)(*(_guard_conditions(child, rule_id) for child in element))
    if isinstance(element, Fact) and element.has_field_constraints():
        fields = {k: _guard_conditions(v, rule_id) for k, v in element.items() if not Fact.is_special(k)}
        positional = [fields.pop(k) for k in sorted(k for k in fields if isinstance(k, int))]
        guarded = type(element)(*positional, **fields)
        if element.__bind__ is not None:
            guarded.__bind__ = element.__bind__
        return guarded
    return element


def rule(spec: RuleSpec, *patterns: Any, salience: int = 0, alone: bool = False) -> Callable[[Callable[..., Finding | None]], Rule]:
    """Turn a body into an experta rule carrying its spec; a child also matches its parent's ``Holds``,
    unless ``alone``: a body whose own measurement (an A/B of exactly its setting) bounds its gain needs
    no parent to hold first."""

    def wrap(body: Callable[..., Finding | None]) -> Rule:
        body = rebind(body, spec.id)  # reads its module's thresholds through this run's overrides
        conditions = [_guard_conditions(p, spec.id) for p in patterns]
        if spec.parent and not alone:
            # A refinement waits for its parent to hold, unless the parent cannot be evaluated
            # at all (its inputs are absent): then config or symptom evidence names the
            # refinement on its own, the parent is implied, and neither gain is bounded yet.
            held = Holds(rule=spec.parent, cap_ms=getattr(MATCH, PARENT_CAP), step_ms=getattr(MATCH, PARENT_STEP))
            conditions.append(OR(held, Unevaluable(rule=spec.parent)))

        def fire(engine: Any, **bindings: Any) -> None:
            engine.fire(spec, body, bindings)

        fire.__name__ = body.__name__
        fire.__qualname__ = body.__qualname__
        fire.__doc__ = body.__doc__
        compiled = Rule(*conditions, salience=salience)(fire)
        compiled.spec = spec
        compiled.body = body
        return compiled

    return wrap
