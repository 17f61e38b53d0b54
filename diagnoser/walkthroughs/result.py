"""What a walkthrough run hands to whoever shows it: the step to ask, each verdict, the score.

The terminal, `--json` and a TUI screen read these models and nothing else; none of them
checks an answer or computes a score.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

RESULT_SCHEMA_VERSION = 1


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Option(_Out):
    letter: str
    id: str
    text: str


class StepView(_Out):
    """The step to ask now."""

    id: str
    number: int = Field(description="1-based position in the walkthrough")
    total: int
    skill: str
    kind: str = Field(description="number, choice or order")
    ask: str
    unit: str | None = Field(default=None, description="number steps: the unit answers are read in")
    options: list[Option] = Field(default_factory=list, description="choice and order steps, in the order shown")


class Outcome(str, Enum):
    correct = "correct"
    trap = "trap"  # a wrong answer the step recognises as a named, common mistake
    wrong = "wrong"
    unreadable = "unreadable"  # not a number, choice or ordering of the step's kind
    skipped = "skipped"  # no answer given


class Verdict(_Out):
    step: str
    skill: str
    ask: str
    outcome: Outcome
    answer: str | None = Field(default=None, description="the answer as given")
    read_as: str | None = Field(default=None, description="how it was read, e.g. '5 ms' or 'b) ...'")
    expected: str
    points: float
    earned: float
    trap: str | None = Field(default=None, description="the mistake recognised, when outcome is trap")
    why: list[str] = Field(default_factory=list, description="about the answer given")
    explanation: str = Field(description="the step's reasoning")
    worked: list[str] = Field(default_factory=list, description="the calculator's own working")
    engine: list[str] = Field(default_factory=list, description="what the rule engine concludes on the step's case")
    follow_ups: list[str] = Field(default_factory=list)


class SkillScore(_Out):
    skill: str
    covers: str
    earned: float
    possible: float
    steps: int


class WalkthroughResult(_Out):
    schema_version: int = RESULT_SCHEMA_VERSION
    walkthrough: str
    title: str
    complete: bool = Field(description="every step was answered or skipped in the run (false: the run stopped early)")
    earned: float
    possible: float
    percent: float
    skills: list[SkillScore]
    steps: list[Verdict]
    debrief: str | None = None
    source: str | None = None
