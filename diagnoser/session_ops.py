"""Steps of a guided session as pure functions: case in, new case (or decision) out.

The TUI only collects what the engineer typed or chose; turning it into a valid case is
done here, through the same pydantic models every file goes through, so an answer typed in
the interview is held to exactly the rules a case file is. Validation failures keep the
field each error belongs to, so a form can show it beside that field.
"""

from __future__ import annotations

from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.hypothesis import Diagnosis, Kind
from diagnoser.models.observations import Observations
from diagnoser.models.session import Answer, Decision, Session, Source

# Inputs that are sections of the case itself rather than of its observations.
CASE_SECTIONS = ("workload", "bound_inputs")


class FieldErrors(InputError):
    """Validation failed; ``fields`` maps a field path (relative to the form) to its message."""

    def __init__(self, message: str, fields: dict[str, str]) -> None:
        super().__init__(message)
        self.fields = fields


def field_errors(err: ValidationError, prefix: tuple[str, ...], where: str) -> FieldErrors:
    """Each error under ``prefix`` keyed by the rest of its location ("" for the form as a whole)."""
    fields: dict[str, str] = {}
    for item in err.errors():
        loc = tuple(str(p) for p in item["loc"])
        key = ".".join(loc[len(prefix):]) if loc[: len(prefix)] == prefix else ""
        fields.setdefault(key, item["msg"].removeprefix("Value error, "))
    first_key, first_msg = next(iter(fields.items()))
    return FieldErrors(f"{where}: {first_key + ': ' if first_key else ''}{first_msg}", fields)


def answer_path(name: str) -> tuple[str, ...]:
    """Where in the case document an input lives: ('observations', 'boundaries', 'device_step_ms')."""
    section, _, field = name.partition(".")
    if section in CASE_SECTIONS:
        base: tuple[str, ...] = (section,)
    elif section in Observations.model_fields:
        base = ("observations", section)
    elif section == "bound":
        raise InputError("bound: pin the workload on the Pin screen; the bound follows from it")
    else:
        raise InputError(f"{name}: not an input of a case")
    return base + ((field,) if field else ())


def answer_section(name: str) -> str:
    """The case section an input belongs to, as sources name it: observations.boundaries, workload."""
    path = answer_path(name)
    return ".".join(path[:2] if path[0] == "observations" else path[:1])


def alternatives(annotation: Any) -> list[Any]:
    """The types a field may hold, None left out: ``X | None`` -> [X]."""
    if get_origin(annotation) in (Union, UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return [annotation]


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, ``X | None`` unwrapped; None for a scalar or a list."""
    return next((a for a in alternatives(annotation) if isinstance(a, type) and issubclass(a, BaseModel)), None)


def answer_annotation(name: str) -> Any:
    """The type an answer to ``name`` must have: a model, a list of models, or one field's type."""
    annotation: Any = Case
    for key in answer_path(name):
        annotation = model_of(annotation).model_fields[key].annotation
    return annotation


def apply_answer(case: Case, answer: Answer) -> Case:
    """The case with the answer in place: a mapping merges into its section, a list or a field value replaces."""
    path = answer_path(answer.input)
    doc = case.model_dump(mode="json", exclude_none=True)
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {})
    leaf = path[-1]
    value = answer.value
    if isinstance(value, dict) and isinstance(node.get(leaf), dict):
        value = {**node[leaf], **value}
    node[leaf] = value
    try:
        return Case.model_validate(doc)
    except ValidationError as err:
        raise field_errors(err, path, answer.input) from None


def pin_workload(case: Case, workload: dict[str, Any]) -> Case:
    """The case with a new pin; an unknown model is an error on the model field."""
    from diagnoser.models.model_spec import resolve_model

    try:
        pinned = Case.model_validate({**case.model_dump(mode="json", exclude_none=True), "workload": workload})
    except ValidationError as err:
        raise field_errors(err, ("workload",), "pin") from None
    if pinned.workload is not None and pinned.workload.model is not None:
        try:
            resolve_model(pinned.workload.model)
        except InputError as err:
            raise FieldErrors(f"pin: model: {err}", {"model": str(err)}) from None
    return pinned


def merge_sections(case: Case, observations: Observations) -> tuple[Case, list[str]]:
    """The case with every observation section ``observations`` sets replaced, and those sections' names.

    A trace analysis sets the sections it measured; a case file loaded as evidence, the ones it gives.
    """
    names = sorted(observations.model_fields_set)
    merged = case.observations.model_copy(update={name: getattr(observations, name) for name in names})
    return case.model_copy(update={"observations": Observations.model_validate(merged.model_dump())}), names


def merge_case(case: Case, evidence: Case) -> tuple[Case, list[str]]:
    """A case file's pin (when it has one) and observation sections merged in, and the sections it set."""
    merged, names = merge_sections(case, evidence.observations)
    sections = [f"observations.{name}" for name in names]
    if evidence.workload is not None:
        merged = merged.model_copy(update={"workload": evidence.workload})
        sections.insert(0, "workload")
    return merged, sections


def load_probe_report(path: str | Path) -> Any:
    """A saved ``probe --json`` report; the one place the TUI reaches the probe report model."""
    from diagnoser.models.probe_report import load_report

    return load_report(path)


def merge_probe_report(case: Case, report: Any) -> tuple[Case, list[str]]:
    """The case with a probe report's facts merged as ``probe --from-report --case`` merges them."""
    from diagnoser.probes.to_case import merge_report, observation_updates

    sections = sorted(f"observations.{name}" for name in observation_updates(report))
    try:
        merged = Case.model_validate(merge_report(case, report).model_dump(mode="json"))
    except ValidationError as err:
        raise InputError(f"probe facts do not fit the case: {err.errors()[0]['msg']}") from None
    return merged, sections


def with_source(session: Session, source: Source, **changes: Any) -> Session:
    """The session with ``changes`` applied and their origin recorded."""
    return session.model_copy(update={**changes, "sources": [*session.sources, source]})


def section_sources(session: Session) -> dict[str, Source]:
    """The latest source of each case section."""
    latest: dict[str, Source] = {}
    for source in session.sources:
        for section in source.sections:
            latest[section] = source
    return latest


def cause_ranking(diagnosis: Diagnosis) -> list[str]:
    return [h.id for h in diagnosis.hypotheses if h.kind is Kind.cause]


def ranking_changes(before: Diagnosis, after: Diagnosis) -> list[str]:
    """How the ranked causes moved, in words: what an answer changed."""
    old, new = cause_ranking(before), cause_ranking(after)
    lines = []
    for place, hid in enumerate(new, 1):
        if hid not in old:
            lines.append(f"{hid}: new, ranks {place}")
        elif old.index(hid) + 1 != place:
            lines.append(f"{hid}: {old.index(hid) + 1} -> {place}")
    lines += [f"{hid}: no longer holds" for hid in old if hid not in new]
    return lines


def decide(diagnosis: Diagnosis, hypothesis_id: str, remedy_index: int, note: str = "") -> Decision:
    """The decision to apply one remedy of one hypothesis, with its prediction and undo criteria."""
    hypothesis = next((h for h in diagnosis.hypotheses if h.id == hypothesis_id), None)
    if hypothesis is None:
        raise InputError(f"{hypothesis_id}: no such hypothesis in the diagnosis")
    if not 0 <= remedy_index < len(hypothesis.remedies):
        raise InputError(f"{hypothesis_id}: has no remedy {remedy_index + 1}")
    return Decision(
        hypothesis=hypothesis.id,
        title=hypothesis.title,
        remedy=hypothesis.remedies[remedy_index],
        gain=hypothesis.gain,
        undo=hypothesis.undo,
        note=note,
    )
