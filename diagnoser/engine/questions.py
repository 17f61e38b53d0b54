"""The next question: which missing fact would settle the most among what is still open.

A senior engineer does not ask for everything; they ask for the one measurement that splits
the live hypotheses. A missing input scores for every open (unbounded) hypothesis it would
bound or refute, weighted by grade, and for every cause rule it would let evaluate, weighted
by whether that rule refines time the diagnosis already holds. A rule that has concluded is
never counted as unable to evaluate, and a rule about a part the pinned model does not have
(experts on a dense model) is never asked about: no answer could make it apply.
"""

from __future__ import annotations

from collections import defaultdict

from diagnoser.engine.facts import INPUTS, input_info
from diagnoser.engine.loader import Rulebook
from diagnoser.models.hypothesis import BoundSummary, Grade, Hypothesis, Kind, Question
from diagnoser.models.model_spec import ModelFeature

# An open hypothesis counts far more than a rule that has not spoken: it already has evidence, and
# the question either bounds it or refutes it. Ten silent rules do not outweigh one.
OPEN_WEIGHT = {Grade.measured: 10.0, Grade.indicated: 10.0, Grade.possible: 5.0}
# A rule that refines a held cause splits time the diagnosis already claims.
REFINES_HELD_WEIGHT = 2.0
ROOT_WEIGHT = 1.0
# A refinement of a cause that is itself unevaluated is two measurements away.
DEEP_WEIGHT = 0.5


def _rule_weight(rulebook: Rulebook, spec_id: str, causes: dict[str, Hypothesis], unevaluable: set[str]) -> float | None:
    spec = rulebook.specs[spec_id]
    if spec.parent is None:
        return ROOT_WEIGHT
    parent = causes.get(spec.parent)
    if parent is not None and parent.gain is not None:
        return REFINES_HELD_WEIGHT * (1 + parent.gain.share_of_step)
    if parent is not None or spec.parent in unevaluable:
        return DEEP_WEIGHT
    return None  # the parent was evaluated and does not hold: nothing to refine


def next_questions(
    rulebook: Rulebook,
    present: set[str],
    hypotheses: list[Hypothesis],
    bound: BoundSummary | None = None,
    features: frozenset[ModelFeature] | None = None,
) -> list[Question]:
    """Every missing input that would bound or evaluate something, best first.

    ``features`` are the pinned model's parts (None when no model is pinned: then any rule may
    apply). An input the bound did without leaves the floor low: every conclusion read from the
    floor is open again until it is given, and every rule that judges by the floor has not yet
    judged the real one.
    """
    applicable = [s for s in rulebook.specs.values() if features is None or s.applies is None or s.applies in features]
    causes = {}
    for h in hypotheses:
        if h.kind is Kind.cause:
            causes.setdefault(h.rule, h)
    unevaluable = {
        s.id for s in rulebook.specs.values() if s.kind is Kind.cause and any(n not in present for n in s.requires)
    }
    score: dict[str, float] = defaultdict(float)
    bounds: dict[str, set[str]] = defaultdict(set)
    evaluate: dict[str, set[str]] = defaultdict(set)
    for h in hypotheses:
        if h.kind is not Kind.cause or h.gain is not None or h.grade is None:
            continue
        for name in h.bounded_by:
            if name not in present and name.partition(".")[0] in INPUTS:
                score[name] += OPEN_WEIGHT[h.grade]
                bounds[name].add(h.id)
    reading = [h for h in hypotheses if any(e.name.startswith("bound.") for e in h.evidence)]
    for name in bound.lacks if bound else ():
        for h in reading:
            score[name] += OPEN_WEIGHT[h.grade or Grade.indicated]
            bounds[name].add(h.id)
        for spec in applicable:
            if "bound" in spec.requires and spec.id not in {h.rule for h in reading}:
                score[name] += ROOT_WEIGHT
                evaluate[name].add(spec.id)
    for spec in applicable:
        if spec.kind is not Kind.cause or not spec.report_missing or spec.id in causes:
            continue
        missing = [n for n in spec.requires if n not in present]
        weight = _rule_weight(rulebook, spec.id, causes, unevaluable) if missing else None
        if weight is None:
            continue
        for name in missing:
            score[name] += weight / len(missing)
            evaluate[name].add(spec.id)
    folded = _fold_fields_into_sections(score, bounds, evaluate)
    questions = [
        Question(
            input=name,
            label=_label(name, folded.get(name, [])),
            how=input_info(name).how,
            score=round(value, 4),
            would_bound=sorted(bounds[name]),
            would_evaluate=sorted(evaluate[name]),
        )
        for name, value in score.items()
    ]
    return sorted(questions, key=lambda q: (-q.score, q.input))


def _fold_fields_into_sections(
    score: dict[str, float], bounds: dict[str, set[str]], evaluate: dict[str, set[str]]
) -> dict[str, list[str]]:
    """One question per section: when a whole section is asked for, a question about one of its
    fields asks for the same thing again (answering the section gives the field), so the field's
    weight and reasons join the section's. Returns the fields folded into each section."""
    folded: dict[str, list[str]] = defaultdict(list)
    for name in sorted(n for n in score if "." in n and n.partition(".")[0] in score):
        section, _, field = name.partition(".")
        score[section] += score.pop(name)
        bounds[section] |= bounds.pop(name, set())
        evaluate[section] |= evaluate.pop(name, set())
        folded[section].append(field)
    return folded


def _label(name: str, fields: list[str]) -> str:
    label = input_info(name).label
    return f"{label}, above all {', '.join(fields)}" if fields else label
