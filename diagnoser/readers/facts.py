"""The one contract between readers and the case: a fact is a dotted case path, a value and a source.

    facts = SourcedFacts()
    facts.add("observations.server.max_num_seqs", 4, "/server_info vllm_config.scheduler_config.max_num_seqs")
    case = apply_facts(case, facts)      # validated as a whole; case.sources names each fact's origin

A later reader's fact replaces an earlier one's only through ``merge``, which keeps both when
they disagree (``conflicts``), so two documents that say different things are shown side by
side rather than one silently winning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pydantic import BaseModel, ValidationError

from diagnoser.errors import InputError
from diagnoser.models.case import Case


@dataclass(frozen=True)
class Sourced:
    value: Any
    source: str


@dataclass(frozen=True)
class Conflict:
    path: str
    kept: Sourced
    other: Sourced


@dataclass
class SourcedFacts:
    facts: dict[str, Sourced] = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)
    # what a reader looked for and could not get, and how the user can supply it
    missing: list[str] = field(default_factory=list)

    def add(self, path: str, value: Any, source: str) -> None:
        """Record one fact; None is "not known" and is never recorded."""
        if value is None:
            return
        self.merge_one(path, Sourced(value, source))

    def merge_one(self, path: str, new: Sourced) -> None:
        old = self.facts.get(path)
        if old is not None and old.value != new.value:
            self.conflicts.append(Conflict(path, old, new))
            return
        if old is None:
            self.facts[path] = new

    def merge(self, other: "SourcedFacts") -> "SourcedFacts":
        for path, sourced in other.facts.items():
            self.merge_one(path, sourced)
        self.conflicts += other.conflicts
        self.missing += [m for m in other.missing if m not in self.missing]
        return self

    def __contains__(self, path: str) -> bool:
        return path in self.facts

    def value(self, path: str, default: Any = None) -> Any:
        found = self.facts.get(path)
        return found.value if found is not None else default


def _set(tree: dict, path: list[str], value: Any) -> None:
    for key in path[:-1]:
        node = tree.get(key)
        if not isinstance(node, dict):
            node = tree[key] = {}
        tree = node
    tree[path[-1]] = value


def apply_facts(case: Case, facts: SourcedFacts) -> Case:
    """The case with every fact set at its path (over what the case had) and its source recorded."""
    data = case.model_dump(mode="json", exclude_none=True, exclude_unset=True)  # what was stated stays stated
    for path, sourced in facts.facts.items():
        _set(data, path.split("."), sourced.value)
    data["sources"] = {**data.get("sources", {}), **{p: s.source for p, s in facts.facts.items()}}
    try:
        return Case.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{where}: {first['msg']} (from {facts.facts.get(where, Sourced(None, 'the case')).source})") from None


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value


def observation_facts(updates: dict[str, Any], source: str) -> SourcedFacts:
    """Observation sections a probe or a trace produced (``{"budget": StepBudget(...)}``), field by
    field, so each field carries ``source`` and one section can be filled from several sources."""
    facts = SourcedFacts()
    for key, value in updates.items():
        if isinstance(value, BaseModel):
            for name in value.model_fields_set:
                facts.add(f"observations.{key}.{name}", _plain(getattr(value, name)), source)
        elif value is not None and value != []:
            facts.add(f"observations.{key}", _plain(value), source)
    return facts
