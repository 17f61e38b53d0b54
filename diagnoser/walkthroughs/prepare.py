"""A walkthrough file made ready to run: every figure computed, every rule and case found.

Loading computes each numeric step's answer and each trap's wrong answer with the named
calculator, so what a trainee is scored against is always the tool's current figure. A trap
that lands within the step's tolerance of the answer is refused: the step could not tell the
mistake from the right answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from diagnoser.engine.loader import Rulebook
from diagnoser.errors import InputError, nearest
from diagnoser.models.case import Case
from diagnoser.walkthroughs.calculators import calculate, read_field
from diagnoser.walkthroughs.model import (
    EXPECTED_VALUE,
    TRAP_VALUE,
    ChoiceStep,
    Compute,
    EngineView,
    NumberStep,
    Tolerance,
    Trap,
    Walkthrough,
)


@dataclass(frozen=True)
class Figure:
    """A computed number: ``value`` in the step's unit, ``base`` as the calculator gives it."""

    value: float
    base: float
    worked: list[str]


@dataclass(frozen=True)
class TrapFigure:
    trap: Trap
    figure: Figure


@dataclass
class Prepared:
    doc: Walkthrough
    origin: str  # the file it came from, or the entry point that installed it
    folder: Path
    book: Rulebook
    figures: dict[str, Figure] = field(default_factory=dict)  # number steps
    traps: dict[str, list[TrapFigure]] = field(default_factory=dict)
    diagnoses: dict[str, Any] = field(default_factory=dict)  # engine runs, by canonical case JSON

    def rule_title(self, rule_id: str) -> str:
        return self.book.specs[self.book.resolve(rule_id)].title


def within(tolerance: Tolerance, expected: float, value: float) -> bool:
    allowed = tolerance.absolute if tolerance.absolute is not None else tolerance.relative * abs(expected)  # type: ignore[operator]
    return abs(value - expected) <= allowed


def tolerance_text(tolerance: Tolerance, unit: str) -> str:
    if tolerance.absolute is not None:
        return f"+/- {tolerance.absolute:g} {unit}"
    return f"+/- {tolerance.relative * 100:g} %"  # type: ignore[operator]


def resolve(value: Any, trap: float | None = None, expected: float | None = None) -> Any:
    """Plain values from a YAML value: computed mappings evaluated, placeholders filled in."""
    if isinstance(value, dict):
        if "calculator" in value:
            return compute(_spec(value))[0]
        return {key: resolve(v, trap, expected) for key, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, trap, expected) for v in value]
    for marker, filled in ((TRAP_VALUE, trap), (EXPECTED_VALUE, expected)):
        if value == marker:
            if filled is None:
                raise InputError(f"{marker} is used where there is no such figure ({TRAP_VALUE} only in a trap's engine case)")
            return filled
    return value


def _spec(value: dict[str, Any]) -> Compute:
    try:
        return Compute.model_validate(value)
    except ValidationError as err:
        first = err.errors()[0]
        raise InputError(f"computed value {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def compute(spec: Compute) -> tuple[float, list[str]]:
    inputs = {name: resolve(value) for name, value in spec.inputs.items()}
    result, worked = calculate(spec.calculator, inputs)
    return read_field(result, spec.field), worked


def _figure(spec: Compute, scale: float) -> Figure:
    base, worked = compute(spec)
    return Figure(value=base * scale, base=base, worked=worked)


def _check_rule(book: Rulebook, rule_id: str | None) -> None:
    if rule_id is not None and book.resolve(rule_id) not in book.specs:
        hint = nearest(rule_id, sorted(book.specs))
        raise InputError(f"rule {rule_id!r} is not a loaded rule" + (f" (nearest: {hint})" if hint else ""))


def beside(folder: Path, name: str, what: str) -> Path:
    """A file a walkthrough names, which must lie in the walkthrough's own folder tree: a shared
    walkthrough pack must not make diagnoser read (and quote) a file elsewhere on the machine."""
    path = (folder / name).resolve()
    if not path.is_relative_to(folder.resolve()):
        raise InputError(f"{what} {name}: outside the walkthrough's folder; put the case beside the walkthrough")
    if not path.is_file():
        raise InputError(f"{what} {name}: no such file beside the walkthrough")
    return path


def _check_view(book: Rulebook, folder: Path, view: EngineView | None, has_case: bool) -> None:
    if view is None:
        return
    for rule_id in view.fires:
        _check_rule(book, rule_id)
    if view.case is None and not has_case:
        raise InputError("an engine view without a case needs the walkthrough's case")
    if isinstance(view.case, str):
        beside(folder, view.case, "engine case")


def _prepare_number(prepared: Prepared, step: NumberStep) -> None:
    expected = _figure(step.compute, step.scale)
    prepared.figures[step.id] = expected
    traps = []
    for trap in step.traps:
        try:
            figure = _figure(trap.compute, step.scale)
        except InputError as err:
            raise InputError(f"trap {trap.name!r}: {err}") from None
        if within(step.tolerance, expected.value, figure.value):
            raise InputError(
                f"trap {trap.name!r} gives {figure.value:.4g} {step.unit}, within the tolerance of the answer "
                f"{expected.value:.4g}: the step cannot tell them apart"
            )
        traps.append(TrapFigure(trap=trap, figure=figure))
    prepared.traps[step.id] = traps


def prepare(doc: Walkthrough, origin: str, folder: Path, book: Rulebook) -> Prepared:
    """Compute every figure and check every name; the first problem is one line naming its step."""
    prepared = Prepared(doc=doc, origin=origin, folder=folder, book=book)
    if doc.case is not None:
        from diagnoser.models.case import load_case

        load_case(beside(folder, doc.case, f"{origin}: case"))
    for step in doc.steps:
        try:
            if isinstance(step, NumberStep):
                _prepare_number(prepared, step)
                for trap in step.traps:
                    _check_rule(book, trap.rule)
                    _check_view(book, folder, trap.engine, doc.case is not None)
            if isinstance(step, ChoiceStep):
                for choice in step.choices:
                    _check_rule(book, choice.rule)
                    _check_view(book, folder, choice.engine, doc.case is not None)
            _check_view(book, folder, step.engine, doc.case is not None)
        except InputError as err:
            raise InputError(f"{origin}: step {step.id}: {err}") from None
    return prepared


def engine_case(prepared: Prepared, view: EngineView, trap: Figure | None = None, expected: Figure | None = None) -> Case:
    """The case an engine view runs on, its computed values and placeholders filled in."""
    from diagnoser.models.case import load_case
    from diagnoser.models.documents import validation_message

    if view.case is None:
        return load_case(beside(prepared.folder, prepared.doc.case, "case"))  # type: ignore[arg-type]
    if isinstance(view.case, str):
        return load_case(beside(prepared.folder, view.case, "engine case"))
    data = resolve(view.case, trap.base if trap else None, expected.base if expected else None)
    try:
        return Case.model_validate(data)
    except ValidationError as err:
        raise InputError(validation_message(err, "engine case")) from None
