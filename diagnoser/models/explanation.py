"""Why one rule concluded or stayed silent on one case: the contract `rules explain` renders."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from diagnoser.models.hypothesis import Kind


class ConditionResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    condition: str  # the pattern as an author wrote it, e.g. "Budget(launch_ms=?launch, step_ms=?step)"
    holds: bool
    detail: str = ""  # the values that made it hold, or why it did not


class BodyExplanation(BaseModel):
    """One experta rule of the spec (a spec may have several ways to conclude)."""

    model_config = ConfigDict(extra="forbid")

    body: str
    defined_at: str
    matched: bool  # every condition held for one set of facts
    conditions: list[ConditionResult]  # the furthest the match got, up to the first that failed


class RuleExplanation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: str
    kind: Kind
    title: str
    parent: str | None = None
    requires: list[str]
    missing_inputs: list[str]
    outcome: Literal["concluded", "declined", "raised", "silent"]
    hypotheses: list[str]  # ids it produced
    error: str | None = None
    bodies: list[BodyExplanation]
    stopped_at: str = ""  # the first failed condition of the furthest match; empty when one matched
