"""`diagnoser walkthrough lint`: everything loading checks, and the engine views run.

Loading already refuses a bad field, an unknown calculator or input, a step that does not
compute, an answer outside its choices, a trap equal to the answer and an unknown rule.
Lint also runs the engine on every view and refuses one whose rules do not conclude, so a
trap that says "the engine calls this a mistake" is one the engine does call a mistake.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from diagnoser.engine.loader import Rulebook
from diagnoser.errors import InputError
from diagnoser.walkthroughs import engine_view
from diagnoser.walkthroughs.model import ChoiceStep, NumberStep
from diagnoser.walkthroughs.prepare import Prepared
from diagnoser.walkthroughs.sources import load_catalogue, walkthrough_files


def _views(prepared: Prepared):
    """Every engine view with the figures it is run with."""
    for step in prepared.doc.steps:
        expected = prepared.figures.get(step.id)
        if step.engine:
            yield step, step.engine, None, expected
        if isinstance(step, NumberStep):
            yield from ((step, t.trap.engine, t.figure, expected) for t in prepared.traps[step.id] if t.trap.engine)
        if isinstance(step, ChoiceStep):
            yield from ((step, c.engine, None, None) for c in step.choices if c.engine)


def check_engine(prepared: Prepared) -> None:
    for step, view, trap, expected in _views(prepared):
        try:
            found = engine_view.problems(prepared, view, trap, expected)
        except InputError as err:
            raise InputError(f"{prepared.origin}: step {step.id}: {err}") from None
        if found:
            raise InputError(f"{prepared.origin}: step {step.id}: {found[0]}")


def lint(paths: Iterable[str | Path], book: Rulebook) -> list[Prepared]:
    """The walkthroughs in ``paths``, each fully checked; the first problem is raised as one line."""
    paths = list(paths)
    if not walkthrough_files(paths):
        raise InputError("no walkthrough files found")
    checked = load_catalogue(paths, bundled=False, entry_points=False, book=book)
    for prepared in checked.values():
        check_engine(prepared)
    return list(checked.values())
