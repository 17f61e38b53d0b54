"""What the rule engine says about a walkthrough's case, as lines for an explanation.

The trainee's answer is explained with the engine's own conclusions on the same facts: the
guard that names the mistake, the ranking of causes with their checks, the next questions.
A view whose rules do not conclude is a broken walkthrough (``problems`` says so for lint).
"""

from __future__ import annotations

from diagnoser.errors import InputError
from diagnoser.models.hypothesis import Diagnosis, Kind
from diagnoser.walkthroughs.model import EngineView
from diagnoser.walkthroughs.prepare import Figure, Prepared, engine_case


def diagnosis(prepared: Prepared, view: EngineView, trap: Figure | None = None, expected: Figure | None = None) -> Diagnosis:
    """The engine's diagnosis of the view's case, run once per distinct case."""
    from diagnoser.engine import diagnose

    case = engine_case(prepared, view, trap, expected)
    key = case.model_dump_json()
    if key not in prepared.diagnoses:
        try:
            prepared.diagnoses[key] = diagnose(case, prepared.book)
        except InputError as err:
            raise InputError(f"engine case: {err}") from None
    return prepared.diagnoses[key]


def rule_line(prepared: Prepared, rule_id: str) -> str:
    """A rule in the rule base's own words: its kind, title and explanation."""
    spec = prepared.book.specs[prepared.book.resolve(rule_id)]
    return f"the rule base's {spec.kind.value} {spec.id}: {spec.title}. {spec.explanation}"


def lines(prepared: Prepared, view: EngineView, trap: Figure | None = None, expected: Figure | None = None) -> list[str]:
    from diagnoser.report.diagnosis import gain_text, question_text

    found = diagnosis(prepared, view, trap, expected)
    out = []
    for rule_id in view.fires:
        for h in (h for h in found.hypotheses if h.rule == prepared.book.resolve(rule_id)):
            out.append(f"engine, {h.kind.value} [{h.id}]: {h.title}. {h.explanation}")
    causes = found.of_kind(Kind.cause)[: view.ranking]
    for index, h in enumerate(causes, 1):
        check = f"; check: {h.check.measure}" if h.check else ""
        out.append(f"engine ranks {index}. [{h.id}] {h.title} ({h.grade.value if h.grade else 'ungraded'}; {gain_text(h)}){check}")
    if view.ranking and not causes:
        out.append("engine ranks no cause on these facts")
    out += [f"engine asks next: {question_text(q)}" for q in found.questions[: view.questions]]
    return out


def problems(prepared: Prepared, view: EngineView, trap: Figure | None = None, expected: Figure | None = None) -> list[str]:
    """Rules the view says conclude on its case but do not."""
    found = {h.rule for h in diagnosis(prepared, view, trap, expected).hypotheses}
    return [f"rule {r} does not conclude on the engine case" for r in view.fires if prepared.book.resolve(r) not in found]
