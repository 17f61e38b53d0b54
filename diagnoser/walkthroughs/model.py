"""The walkthrough document: what an expert writes, and what `diagnoser walkthrough lint` checks.

A numeric step names a calculator and its inputs, never the figure: the expected answer, and
every trap's wrong answer, is computed by the tool when the file loads, so a walkthrough
cannot teach a number the calculators would not give. The checks that need no calculator
or rule base (ids, skills, answers among the choices) live here, on the model; the ones
that do live in ``prepare``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

WALKTHROUGH_SCHEMA_VERSION = 1
# Step, choice and item ids: at least two characters, so a one-letter answer always means a listed option.
ID_PATTERN = r"^[a-z0-9][a-z0-9_.:-]+$"
# Words of the command line that cannot name a walkthrough.
RESERVED_NAMES = frozenset({"lint"})
# Placeholders an engine case may hold: the trap's computed figure, the step's computed answer.
TRAP_VALUE = "$trap"
EXPECTED_VALUE = "$expected"


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Compute(_Doc):
    """A figure the tool computes: the calculator, its inputs and the field of its result."""

    calculator: str = Field(description="a calculator name; `diagnoser walkthrough lint` lists the known ones on a typo")
    inputs: dict[str, Any] = Field(
        default_factory=dict, description="keyword inputs; any value may itself be a {calculator, inputs, field} mapping"
    )
    field: str = Field(description="dotted path into the result, e.g. speedup, naive.floor_ms or 32.aggregate_tokens_per_s")


class Tolerance(_Doc):
    """How far a numeric answer may sit from the computed one and still count as right."""

    relative: float | None = Field(default=None, gt=0, lt=1, description="a share of the expected figure, e.g. 0.02")
    absolute: float | None = Field(default=None, gt=0, description="in the step's unit")

    @model_validator(mode="after")
    def _exactly_one(self) -> "Tolerance":
        if (self.relative is None) == (self.absolute is None):
            raise ValueError("give exactly one of relative or absolute")
        return self


class EngineView(_Doc):
    """The rule engine run on a case at explain time; what it concludes joins the explanation."""

    case: dict[str, Any] | str | None = Field(
        default=None,
        description=f"an inline case (values may be computed, or {TRAP_VALUE} / {EXPECTED_VALUE}), a case file beside "
        "the walkthrough, or omitted for the walkthrough's own case",
    )
    fires: list[str] = Field(default_factory=list, description="rules that must conclude on the case (the linter runs it); shown")
    ranking: int = Field(default=0, ge=0, le=10, description="how many of the engine's ranked causes to show")
    questions: int = Field(default=0, ge=0, le=10, description="how many of the engine's next questions to show")

    @model_validator(mode="after")
    def _shows_something(self) -> "EngineView":
        if not (self.fires or self.ranking or self.questions):
            raise ValueError("an engine view shows something: fires, ranking or questions")
        return self


class Trap(_Doc):
    """A common wrong answer the step recognises, computed the way the mistake computes it."""

    name: str = Field(description="the mistake in a few words, e.g. 'active-parameter bytes as traffic'")
    compute: Compute = Field(description="the wrong figure, computed the way the mistake computes it")
    why: str = Field(description="why this figure is wrong, specifically")
    rule: str | None = Field(default=None, description="the guard or lesson of the rule base that names this mistake")
    engine: EngineView | None = Field(default=None, description="the engine's conclusion on this mistake, shown when it is made")


class Choice(_Doc):
    id: str | None = Field(default=None, pattern=ID_PATTERN, description="defaults to the rule id")
    text: str | None = Field(default=None, description="defaults to the rule's title")
    rule: str | None = Field(default=None, description="the rule whose title says what this choice says (a cause, a guard, a lesson)")
    why: str = Field(description="why this choice is right or wrong")
    engine: EngineView | None = Field(default=None, description="the engine's conclusion, shown when this choice is picked")

    @model_validator(mode="after")
    def _named(self) -> "Choice":
        if self.id is None and self.rule is None:
            raise ValueError("a choice needs an id or a rule")
        if self.text is None and self.rule is None:
            raise ValueError("a choice needs a text or a rule (whose title becomes the text)")
        return self

    @property
    def key(self) -> str:
        return self.id or self.rule  # type: ignore[return-value]


class Item(_Doc):
    id: str = Field(pattern=ID_PATTERN, description="what an answer may name instead of the letter")
    text: str = Field(description="the item as shown")


class _Step(_Doc):
    id: str = Field(pattern=ID_PATTERN, description="what an answer file names the step by")
    skill: str = Field(description="one of the walkthrough's skills; the score is broken down by it")
    ask: str = Field(description="the question, in the project's own words")
    explain: str = Field(description="the reasoning shown after any answer")
    points: float = Field(default=1.0, gt=0, description="what a right answer earns")
    engine: EngineView | None = Field(default=None, description="the engine's own output shown with the explanation")
    follow_ups: list[str] = Field(default_factory=list, description="what an interviewer asks next")


class NumberStep(_Step):
    kind: Literal["number"] = Field(description="a number, checked within a tolerance")
    compute: Compute = Field(description="how the tool computes the answer")
    unit: str = Field(description="the unit answers are read in, e.g. ms, tokens/s, %, x, tokens")
    scale: float = Field(default=1.0, gt=0, description="the calculator's figure times this is the answer in `unit` (100 for a percentage)")
    tolerance: Tolerance = Field(description="how close an answer must be")
    traps: list[Trap] = Field(default_factory=list, description="common wrong answers the step recognises")


class ChoiceStep(_Step):
    kind: Literal["choice"] = Field(description="one choice among causes, remedies or readings")
    choices: list[Choice] = Field(min_length=2, description="in the order they are shown, lettered a, b, c, ...")
    answer: str | list[str] = Field(description="the choice id that is right, or a list of ids each of which is")

    @property
    def answers(self) -> list[str]:
        return [self.answer] if isinstance(self.answer, str) else list(self.answer)

    @model_validator(mode="after")
    def _answer_is_a_choice(self) -> "ChoiceStep":
        keys = [c.key for c in self.choices]
        if len(set(keys)) != len(keys):
            raise ValueError(f"step {self.id}: two choices share an id")
        missing = [a for a in self.answers if a not in keys]
        if missing:
            raise ValueError(f"step {self.id}: answer {missing[0]} is not among the choices ({', '.join(keys)})")
        if len(self.answers) == len(keys):
            raise ValueError(f"step {self.id}: every choice is an answer; give at least one wrong one")
        return self


class OrderStep(_Step):
    kind: Literal["order"] = Field(description="an ordering of steps")
    items: list[Item] = Field(min_length=3, description="in the order they are shown")
    answer: list[str] = Field(description="the item ids in the right order")

    @model_validator(mode="after")
    def _answer_orders_the_items(self) -> "OrderStep":
        ids = [i.id for i in self.items]
        if sorted(self.answer) != sorted(ids) or len(set(ids)) != len(ids):
            raise ValueError(f"step {self.id}: answer must list each item id once ({', '.join(ids)})")
        if self.answer == ids:
            raise ValueError(f"step {self.id}: the items are shown in the right order already")
        return self


Step = Annotated[Union[NumberStep, ChoiceStep, OrderStep], Field(discriminator="kind")]


class Walkthrough(_Doc):
    """A guided scenario: questions, each checked, explained with the tool's output, and scored by skill."""

    schema_version: Literal[1] = Field(default=WALKTHROUGH_SCHEMA_VERSION, description="1")
    name: str = Field(pattern=ID_PATTERN, description="what `diagnoser walkthrough NAME` calls it")
    title: str = Field(description="one line, shown in the list")
    scenario: str = Field(description="what the trainee is told before the first question")
    skills: dict[str, str] = Field(min_length=1, description="skill id -> what it covers; every step names one")
    case: str | None = Field(default=None, description="a case file beside the walkthrough: the facts the reporter had")
    source: str | None = Field(default=None, description="where the real incident was discussed")
    debrief: str | None = Field(default=None, description="shown after the last step, e.g. what the thread found")
    given: dict[str, Any] = Field(
        default_factory=dict,
        description="facts several steps share, written once with a YAML anchor (&name) and used with an alias (*name); "
        "only the steps' use of them is read",
    )
    steps: list[Step] = Field(min_length=1, description="asked in this order")

    @model_validator(mode="after")
    def _consistent(self) -> "Walkthrough":
        if self.name in RESERVED_NAMES:
            raise ValueError(f"name {self.name!r} is a command word")
        ids = [s.id for s in self.steps]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"step id {twice[0]} is used twice")
        unknown = [s for s in self.steps if s.skill not in self.skills]
        if unknown:
            raise ValueError(f"step {unknown[0].id}: skill {unknown[0].skill!r} is not declared in skills")
        unused = sorted(set(self.skills) - {s.skill for s in self.steps})
        if unused:
            raise ValueError(f"skill {unused[0]!r} is declared but no step scores it")
        return self
