"""Fold a probe report into a case, so ``diagnose`` reasons over what was measured.

Each probe module knows how its own facts map to observations (``to_observations``); this
module only merges: a model already in the case is updated field by field (so the device
probe and the bandwidth probe can both fill ``ProbeFacts``), and a list is replaced, because
a fresh measurement supersedes an old one of the same kind, except the collectives of the
served step, which a probe's synthetic ones never replace. A figure a probe could not read
(None) never erases one already known: the graph probe, for one, cannot know whether the
server uses graphs, so it leaves a status from a trace in place.

The case the user named is only read; the merged case is written to a path of its own
(``diagnoser.fileio.merged_case_path``), and only when something in the report maps to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from diagnoser.errors import InputError
from diagnoser.fileio import write_atomic
from diagnoser.models.case import Case, load_case
from diagnoser.models.observations import Observations
from diagnoser.models.probe_report import ProbeReport
from diagnoser.probes.registry import probe_module


def _merge_value(old: Any, new: Any) -> Any:
    if isinstance(old, BaseModel) and isinstance(new, BaseModel) and type(old) is type(new):
        # A probe that could not read a figure says None; that must not erase a known value.
        known = {f: getattr(new, f) for f in new.model_fields_set if getattr(new, f) is not None}
        return old.model_copy(update=known)
    return new


# Lists a probe only fills when the case has none: the probe times synthetic collectives at
# decode sizes, which describe the fabric, while a trace's (or the engineer's) describe the served step.
SERVED_STEP_LISTS = frozenset({"collectives"})


def merge_observations(obs: Observations, updates: dict[str, Any]) -> Observations:
    """A copy of ``obs`` with ``updates`` applied, validated again as a whole."""
    applied: dict[str, Any] = {}
    for key, value in updates.items():
        if key in SERVED_STEP_LISTS and getattr(obs, key):
            continue
        applied[key] = _merge_value(getattr(obs, key), value)
    merged = obs.model_copy(update=applied)
    return Observations.model_validate(merged.model_dump(warnings=False))


def observation_updates(report: ProbeReport) -> dict[str, Any]:
    """Observation updates from every successful probe, each translated by its own module."""
    updates: dict[str, Any] = {}
    for result in report.results:
        if result.facts is None:  # skipped or failed
            continue
        for key, value in probe_module(result.name).to_observations(result.facts).items():
            updates[key] = _merge_value(updates.get(key), value)
    return updates


def merge_report(case: Case, report: ProbeReport) -> Case:
    observations = merge_observations(case.observations, observation_updates(report))
    return case.model_copy(update={"observations": observations})


def merged_case(case_path: str | Path, report: ProbeReport) -> Case | None:
    """The case at ``case_path`` (a new one when there is none) with the report folded in;
    None when no successful probe measured anything a case holds."""
    if not observation_updates(report):
        return None
    path = Path(case_path)
    case = load_case(path) if path.exists() else Case(title="probed")
    try:
        return Case.model_validate(merge_report(case, report).model_dump(mode="json"))
    except ValidationError as err:
        raise InputError(f"{path}: probe facts do not fit the case: {err.errors()[0]['msg']}") from None


def case_text(case: Case, as_json: bool = False, comments: Sequence[str] = ()) -> str:
    """The case as YAML (with ``comments`` above it, for the reader) or as JSON."""
    data = case.model_dump(mode="json", exclude_none=True)
    if as_json:
        import orjson

        return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
    header = "".join(f"# {line}\n" for text in comments for line in text.splitlines())
    return header + yaml.safe_dump(data, sort_keys=False)


def write_case(path: str | Path, case: Case, comments: Sequence[str] = ()) -> None:
    """The case as YAML, or JSON for a ``.json`` path, written atomically."""
    write_atomic(path, case_text(case, Path(path).suffix.lower() == ".json", comments))
