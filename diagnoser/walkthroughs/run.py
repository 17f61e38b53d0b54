"""One trainee going through one walkthrough: ask, check, explain, score.

``WalkthroughRun`` holds no I/O. The CLI feeds it lines from stdin or an answer file; a TUI
screen can feed it from an input widget; all of them show the same ``StepView`` and
``Verdict`` models and end with the same ``WalkthroughResult``.
"""

from __future__ import annotations

from typing import Any

from diagnoser.walkthroughs import explain
from diagnoser.walkthroughs.answers import Unreadable, read_choice, read_number, read_order
from diagnoser.walkthroughs.model import ChoiceStep, NumberStep, OrderStep
from diagnoser.walkthroughs.prepare import Prepared, within
from diagnoser.walkthroughs.result import Option, Outcome, SkillScore, StepView, Verdict, WalkthroughResult


class WalkthroughRun:
    def __init__(self, prepared: Prepared) -> None:
        self.prepared = prepared
        self.verdicts: list[Verdict] = []

    @property
    def done(self) -> bool:
        return len(self.verdicts) == len(self.prepared.doc.steps)

    def _step(self):
        if self.done:
            raise IndexError("the walkthrough is over")
        return self.prepared.doc.steps[len(self.verdicts)]

    def view(self) -> StepView | None:
        """The step to ask next, or None when every step has a verdict."""
        if self.done:
            return None
        step = self._step()
        return StepView(
            id=step.id,
            number=len(self.verdicts) + 1,
            total=len(self.prepared.doc.steps),
            skill=step.skill,
            kind=step.kind,
            ask=step.ask,
            unit=step.unit if isinstance(step, NumberStep) else None,
            options=[Option(letter=l, id=k, text=t) for l, k, t in explain.options(self.prepared, step)],
        )

    def read(self, answer: Any) -> Any:
        """The answer as the current step reads it; raises ``Unreadable`` (ask again) when it cannot."""
        step = self._step()
        if isinstance(step, NumberStep):
            return read_number(answer, step.unit)
        keys = [key for _, key, _ in explain.options(self.prepared, step)]
        return read_choice(answer, keys) if isinstance(step, ChoiceStep) else read_order(answer, keys)

    def submit(self, answer: Any) -> Verdict:
        """Check the answer to the current step and move on. None or an empty answer skips the step;
        an unreadable one is recorded as such (callers that can ask again call ``read`` first)."""
        step = self._step()
        given = None if answer is None or str(answer).strip() == "" else answer
        if given is None:
            verdict = self._verdict(step, Outcome.skipped, None, None, ["no answer given"])
        else:
            try:
                read = self.read(given)
            except Unreadable as err:
                verdict = self._verdict(step, Outcome.unreadable, given, None, [str(err)])
            else:
                verdict = self._judge(step, given, read)
        self.verdicts.append(verdict)
        return verdict

    def _judge(self, step, given: Any, read: Any) -> Verdict:
        prepared = self.prepared
        if isinstance(step, NumberStep):
            shown = explain.with_unit(read, step.unit)
            expected = prepared.figures[step.id]
            if within(step.tolerance, expected.value, read):
                return self._verdict(step, Outcome.correct, given, shown, [])
            for trapped in prepared.traps[step.id]:
                if within(step.tolerance, trapped.figure.value, read):
                    why = explain.trap_lines(prepared, step, trapped)
                    return self._verdict(step, Outcome.trap, given, shown, why, trap=trapped.trap.name)
            off = f", {abs(read - expected.value) / abs(expected.value):.0%} away" if expected.value else ""
            return self._verdict(step, Outcome.wrong, given, shown, [f"{shown} is not the answer{off}"])
        lettered = {key: f"{letter}) {text}" for letter, key, text in explain.options(prepared, step)}
        if isinstance(step, ChoiceStep):
            choice = next(c for c in step.choices if c.key == read)
            why = explain.choice_lines(prepared, choice)
            if read in step.answers:
                return self._verdict(step, Outcome.correct, given, lettered[read], why)
            mistake = explain.is_mistake(prepared, choice)
            return self._verdict(
                step, Outcome.trap if mistake else Outcome.wrong, given, lettered[read], why, trap=choice.key if mistake else None
            )
        assert isinstance(step, OrderStep)
        shown = " > ".join(read)
        if read == step.answer:
            return self._verdict(step, Outcome.correct, given, shown, [])
        first = next(i for i, (got, want) in enumerate(zip(read, step.answer)) if got != want)
        why = [f"position {first + 1} is {step.answer[first]} ({lettered[step.answer[first]]}), not {read[first]}"]
        return self._verdict(step, Outcome.wrong, given, shown, why)

    def _verdict(self, step, outcome: Outcome, given: Any, read_as: str | None, why: list[str], trap: str | None = None) -> Verdict:
        return Verdict(
            step=step.id,
            skill=step.skill,
            ask=step.ask,
            outcome=outcome,
            answer=None if given is None else str(given),
            read_as=read_as,
            expected=explain.expected_text(self.prepared, step),
            points=step.points,
            earned=step.points if outcome is Outcome.correct else 0.0,
            trap=trap,
            why=why,
            explanation=step.explain.strip(),
            worked=explain.worked(self.prepared, step),
            engine=explain.engine_lines(self.prepared, step),
            follow_ups=step.follow_ups,
        )

    def result(self) -> WalkthroughResult:
        """The scored run; steps not reached yet count as skipped."""
        doc = self.prepared.doc
        complete = self.done
        unanswered = [self._verdict(s, Outcome.skipped, None, None, ["not reached"]) for s in doc.steps[len(self.verdicts):]]
        steps = self.verdicts + unanswered
        skills = [
            SkillScore(
                skill=skill,
                covers=covers,
                earned=sum(v.earned for v in steps if v.skill == skill),
                possible=sum(v.points for v in steps if v.skill == skill),
                steps=sum(1 for v in steps if v.skill == skill),
            )
            for skill, covers in doc.skills.items()
        ]
        earned, possible = sum(v.earned for v in steps), sum(v.points for v in steps)
        return WalkthroughResult(
            walkthrough=doc.name,
            title=doc.title,
            complete=complete,
            earned=earned,
            possible=possible,
            percent=100 * earned / possible,
            skills=skills,
            steps=steps,
            debrief=doc.debrief.strip() if doc.debrief else None,
            source=doc.source,
        )
