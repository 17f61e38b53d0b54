"""Scoring the rule base against incidents whose root cause is known.

A case counts as named at rank N when one of the first N causes and guards, in report order,
carries an accepted rule id (or rule:key id) for its root cause. Guards count because a
measurement mistake is a root cause too. The answers live beside the cases as data:
case id -> root-cause category, and category -> accepted ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from diagnoser.engine.loader import Rulebook
from diagnoser.engine.runner import diagnose
from diagnoser.errors import InputError
from diagnoser.models.case import load_case
from diagnoser.models.documents import load_document, validation_message
from diagnoser.models.hypothesis import Diagnosis, Kind


class Answers(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cases: dict[str, str]  # case id -> root-cause category
    accepted: dict[str, list[str]]  # category -> rule ids (or rule:key ids) that name it


@dataclass(frozen=True)
class CaseScore:
    case: str
    category: str
    rank: int | None  # 1-based rank of the first accepted hypothesis among causes and guards
    named: tuple[str, ...]  # the first causes and guards, in report order


def load_answers(path: Path) -> Answers:
    try:
        answers = Answers.model_validate(load_document(path))
    except ValidationError as err:
        raise InputError(validation_message(err, str(path))) from None
    unknown = sorted(set(answers.cases.values()) - set(answers.accepted))
    if unknown:
        raise InputError(f"{path}: category {unknown[0]!r} has no accepted rule ids")
    return answers


def named_in_order(d: Diagnosis) -> list[tuple[str, str]]:
    """(rule, id) of the causes and guards in the order the report prints them."""
    leading = [h for h in d.hypotheses if h.leads]
    rest = [h for h in d.hypotheses if not h.leads and h.kind in (Kind.cause, Kind.guard)]
    causes = [h for h in rest if h.kind is Kind.cause] + [h for h in rest if h.kind is Kind.guard]
    return [(h.rule, h.id) for h in leading + causes]


def score_case(case_id: str, category: str, d: Diagnosis, accepted: list[str]) -> CaseScore:
    named = named_in_order(d)
    rank = next((i for i, (rule, hid) in enumerate(named, 1) if rule in accepted or hid in accepted), None)
    return CaseScore(case=case_id, category=category, rank=rank, named=tuple(hid for _, hid in named))


def score_corpus(folder: Path, rulebook: Rulebook, answers_file: str = "answers.yaml") -> list[CaseScore]:
    if not (folder / answers_file).is_file():
        raise InputError(f"{folder}: no {answers_file} (case id -> category, category -> accepted rule ids)")
    answers = load_answers(folder / answers_file)
    scores = []
    for case_id, category in sorted(answers.cases.items()):
        path = folder / f"{case_id}.yaml"
        if not path.exists():
            raise InputError(f"{path}: listed in {answers_file} but missing")
        accepted = [rulebook.resolve(i) for i in answers.accepted[category]]
        scores.append(score_case(case_id, category, diagnose(load_case(path), rulebook), accepted))
    return scores


def hits_within(scores: list[CaseScore], n: int) -> int:
    """Cases whose true cause is among the first ``n`` named."""
    return sum(1 for s in scores if s.rank is not None and s.rank <= n)


def top_n(scores: list[CaseScore], n: int) -> float:
    return hits_within(scores, n) / len(scores) if scores else 0.0


def share(hits: int, cases: int) -> str:
    """A count of hits as the benches print it: the per cent, then the count it comes from."""
    return f"{hits / cases:.1%} ({hits}/{cases})"
