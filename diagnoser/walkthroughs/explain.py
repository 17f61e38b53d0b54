"""The words shown about a step: its expected answer, why a trap or a choice is wrong, its working.

One source for the trainee's verdicts and the interviewer's sheet, so both say the same
thing about the same answer.
"""

from __future__ import annotations

from diagnoser.models.hypothesis import Kind
from diagnoser.walkthroughs import engine_view
from diagnoser.walkthroughs.answers import letters
from diagnoser.walkthroughs.model import Choice, ChoiceStep, NumberStep, OrderStep
from diagnoser.walkthroughs.prepare import Prepared, TrapFigure, tolerance_text


def number(value: float) -> str:
    return f"{value:.4g}"


def with_unit(value: float, unit: str) -> str:
    return f"{number(value)}{'' if unit in ('%', 'x') else ' '}{unit}"


def choice_text(prepared: Prepared, choice: Choice) -> str:
    return choice.text or prepared.rule_title(choice.rule)  # type: ignore[arg-type]


def options(prepared: Prepared, step) -> list[tuple[str, str, str]]:
    """(letter, id, text) for each option of a choice or order step, in the order shown."""
    if isinstance(step, ChoiceStep):
        shown = [(c.key, choice_text(prepared, c)) for c in step.choices]
    elif isinstance(step, OrderStep):
        shown = [(i.id, i.text) for i in step.items]
    else:
        return []
    return [(letter, key, text) for letter, (key, text) in zip(letters(len(shown)), shown)]


def expected_text(prepared: Prepared, step) -> str:
    if isinstance(step, NumberStep):
        return f"{with_unit(prepared.figures[step.id].value, step.unit)} ({tolerance_text(step.tolerance, step.unit)})"
    shown = {key: (letter, text) for letter, key, text in options(prepared, step)}
    if isinstance(step, ChoiceStep):
        return " or ".join(f"{shown[a][0]}) {shown[a][1]}" for a in step.answers)
    return " > ".join(f"{shown[i][0]}) {i}" for i in step.answer)


def trap_lines(prepared: Prepared, step: NumberStep, trapped: TrapFigure) -> list[str]:
    trap = trapped.trap
    out = [f"{with_unit(trapped.figure.value, step.unit)} is the figure of a known mistake, {trap.name}: {trap.why}"]
    return out + _rule_and_engine(prepared, trap.rule, trap.engine, trapped.figure, prepared.figures[step.id])


def choice_lines(prepared: Prepared, choice: Choice) -> list[str]:
    return [choice.why, *_rule_and_engine(prepared, choice.rule, choice.engine)]


def _rule_and_engine(prepared: Prepared, rule: str | None, view, trap=None, expected=None) -> list[str]:
    """The rule in its own words, unless the engine view shows it concluding (which says the same, and more)."""
    out = []
    if rule and not (view and rule in view.fires):
        out.append(engine_view.rule_line(prepared, rule))
    if view:
        out += engine_view.lines(prepared, view, trap, expected)
    return out


def is_mistake(prepared: Prepared, choice: Choice) -> bool:
    """A wrong choice the rule base names as a mistake (a guard or a lesson), not merely another cause."""
    if choice.rule is None:
        return False
    return prepared.book.specs[prepared.book.resolve(choice.rule)].kind is not Kind.cause


def worked(prepared: Prepared, step, deferred: bool = True) -> list[str]:
    """The calculator's working for a number step. Steps that read one calculation share one
    working, which holds every figure they ask for: shown before the last of them it would give
    away the answers still to come, and shown each time it says the same thing again. So the
    working comes once, after the last step that reads it (``deferred=False``: at every step, for
    the interviewer's sheet, where the answers are the point)."""
    if not isinstance(step, NumberStep):
        return []
    lines = prepared.figures[step.id].worked
    if not deferred or not lines:
        return lines
    steps = prepared.doc.steps
    sharing = [i for i, s in enumerate(steps) if isinstance(s, NumberStep) and prepared.figures[s.id].worked == lines]
    here = steps.index(step)
    if here == sharing[-1]:
        return lines
    if here == sharing[0]:
        return [f"shown after step {sharing[-1] + 1}, the last that reads this calculation (it holds the answers up to there)"]
    return []


def engine_lines(prepared: Prepared, step) -> list[str]:
    if step.engine is None:
        return []
    return engine_view.lines(prepared, step.engine, expected=prepared.figures.get(step.id))
