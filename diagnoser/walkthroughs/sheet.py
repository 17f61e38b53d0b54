"""The interviewer's sheet: the scenario, each question with its answer and reasoning, the wrong
answers candidates give with why they are wrong, and what to ask next."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from diagnoser.walkthroughs import explain
from diagnoser.walkthroughs.model import ChoiceStep, NumberStep
from diagnoser.walkthroughs.prepare import Prepared


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WrongAnswer(_Out):
    answer: str
    why: list[str]


class SheetStep(_Out):
    id: str
    skill: str
    ask: str
    options: list[str] = Field(default_factory=list)
    expected: str
    reasoning: list[str] = Field(description="the step's explanation, the calculator's working, the engine's output")
    wrong_answers: list[WrongAnswer] = Field(default_factory=list)
    follow_ups: list[str] = Field(default_factory=list)


class InterviewerSheet(_Out):
    schema_version: int = 1
    walkthrough: str
    title: str
    scenario: str
    skills: dict[str, str]
    steps: list[SheetStep]
    debrief: str | None = None
    source: str | None = None


def _wrong_answers(prepared: Prepared, step) -> list[WrongAnswer]:
    if isinstance(step, NumberStep):
        return [
            WrongAnswer(answer=f"{explain.with_unit(t.figure.value, step.unit)} ({t.trap.name})", why=explain.trap_lines(prepared, step, t))
            for t in prepared.traps[step.id]
        ]
    if isinstance(step, ChoiceStep):
        lettered = {key: f"{letter}) {text}" for letter, key, text in explain.options(prepared, step)}
        return [
            WrongAnswer(answer=lettered[c.key], why=explain.choice_lines(prepared, c))
            for c in step.choices
            if c.key not in step.answers
        ]
    return []


def _right_answers(prepared: Prepared, step) -> list[str]:
    if not isinstance(step, ChoiceStep):
        return []
    return [line for c in step.choices if c.key in step.answers for line in explain.choice_lines(prepared, c)]


def interviewer_sheet(prepared: Prepared) -> InterviewerSheet:
    doc = prepared.doc
    steps = [
        SheetStep(
            id=step.id,
            skill=step.skill,
            ask=step.ask,
            options=[f"{letter}) {text}" for letter, _, text in explain.options(prepared, step)],
            expected=explain.expected_text(prepared, step),
            reasoning=[
                step.explain.strip(),
                *_right_answers(prepared, step),
                *explain.worked(prepared, step, deferred=False),
                *explain.engine_lines(prepared, step),
            ],
            wrong_answers=_wrong_answers(prepared, step),
            follow_ups=step.follow_ups,
        )
        for step in doc.steps
    ]
    return InterviewerSheet(
        walkthrough=doc.name,
        title=doc.title,
        scenario=doc.scenario.strip(),
        skills=doc.skills,
        steps=steps,
        debrief=doc.debrief.strip() if doc.debrief else None,
        source=doc.source,
    )
