"""Rule fixtures: a case in, the hypotheses that must (and must not) come out.

Fixtures compare rule ids as sets (never firing order, which experta does not fix) and
gains within a tolerance, so a fixture fails only when the reasoning changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from diagnoser.engine.loader import Rulebook
from diagnoser.engine.runner import diagnose
from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.hypothesis import Diagnosis, Grade, Kind
from diagnoser.models.documents import load_document, validation_message

SPEEDUP_TOLERANCE = 0.01


class Fixture(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    case: Case
    first: str | None = Field(default=None, description="rule id that must rank first among causes")
    fires: list[str] = Field(default_factory=list, description="rule ids that must conclude")
    silent: list[str] = Field(default_factory=list, description="rule ids that must not conclude")
    healthy: bool = Field(default=False, description="no cause, guard or lesson at all")
    no_cause: bool = Field(default=False, description="no cause named (checks, guards and lessons allowed)")
    speedup: dict[str, float] = Field(default_factory=dict, description="rule id -> expected bounded speed-up")
    rule_errors: list[str] = Field(default_factory=list, description="rule ids expected to raise")
    grades: dict[str, Grade] = Field(default_factory=dict, description="rule id -> the grade its hypothesis must carry")
    unbounded: list[str] = Field(default_factory=list, description="rule ids that must fire with 'not bounded yet'")
    first_question: str | None = Field(default=None, description="the input the diagnosis must ask for first")
    leads: dict[str, bool] = Field(
        default_factory=dict, description="rule id -> whether it must open the report, ahead of the causes (a guard voiding the comparison)"
    )


class FixtureFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fixtures: list[Fixture]


class FixtureResult(BaseModel):
    file: str
    name: str
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def load_fixtures(path: Path) -> list[Fixture]:
    data = load_document(path)
    try:
        return FixtureFile.model_validate(data).fixtures
    except ValidationError as err:
        raise InputError(validation_message(err, str(path))) from None


def fixture_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
    if not path.exists():
        raise InputError(f"{path}: no such fixture file or folder")
    return [path]


def resolved(fixture: Fixture, rulebook: Rulebook) -> Fixture:
    """The fixture with every rule id it names under its current id (a renamed rule keeps its old one as an alias)."""
    r = rulebook.resolve
    return fixture.model_copy(update={
        "first": r(fixture.first) if fixture.first else None,
        "fires": [r(i) for i in fixture.fires],
        "silent": [r(i) for i in fixture.silent],
        "speedup": {r(i): v for i, v in fixture.speedup.items()},
        "grades": {r(i): v for i, v in fixture.grades.items()},
        "unbounded": [r(i) for i in fixture.unbounded],
        "rule_errors": [r(i) for i in fixture.rule_errors],
        "leads": {r(i): v for i, v in fixture.leads.items()},
    })


@dataclass(frozen=True)
class Diagnosed:
    """A fixture (its rule ids resolved) and the diagnosis of its case, made once for every
    reader: the fixture's own checks, the duplicate-rule hint and the coverage report."""

    file: Path
    fixture: Fixture
    diagnosis: Diagnosis


def diagnosed_fixtures(path: Path, rulebook: Rulebook) -> list[Diagnosed]:
    out = []
    for file in fixture_files(path):
        for fixture in load_fixtures(file):
            fixture = resolved(fixture, rulebook)
            out.append(Diagnosed(file, fixture, diagnose(fixture.case, rulebook)))
    return out


def check_fixture(fixture: Fixture, rulebook: Rulebook) -> list[str]:
    fixture = resolved(fixture, rulebook)
    return problems_of(fixture, diagnose(fixture.case, rulebook))


def problems_of(fixture: Fixture, d: Diagnosis) -> list[str]:
    """What the diagnosis of a (resolved) fixture's case got wrong against the fixture."""
    concluded = {h.rule for h in d.hypotheses if h.rule != "engine"}
    problems = []
    causes = d.of_kind(Kind.cause)
    if fixture.first is not None:
        top = causes[0].rule if causes else None
        if top != fixture.first:
            problems.append(f"expected {fixture.first} first, got {top}")
    problems += [f"expected {r} to fire" for r in fixture.fires if r not in concluded]
    problems += [f"{r} fired but must not" for r in fixture.silent if r in concluded]
    if fixture.no_cause and causes:
        problems.append(f"expected no cause, got {', '.join(h.id for h in causes)}")
    if fixture.healthy:
        noisy = sorted(h.id for h in d.hypotheses if h.kind is not Kind.check)
        if noisy:
            problems.append(f"healthy case concluded {', '.join(noisy)}")
    for rule_id, expected in sorted(fixture.speedup.items()):
        found = [h for h in causes if h.rule == rule_id and h.gain]
        if not found:
            problems.append(f"no gain from {rule_id}")
        elif abs(found[0].gain.speedup - expected) > SPEEDUP_TOLERANCE * expected:
            problems.append(f"{rule_id} speed-up {found[0].gain.speedup:.4f}, expected {expected}")
    for rule_id, grade in sorted(fixture.grades.items()):
        graded = [h.grade for h in causes if h.rule == rule_id]
        if graded and graded[0] is not grade:
            problems.append(f"{rule_id} graded {graded[0].value}, expected {grade.value}")
        elif not graded:
            problems.append(f"expected {rule_id} to fire as a {grade.value} cause")
    for rule_id in fixture.unbounded:
        if any(h.gain is not None for h in causes if h.rule == rule_id):
            problems.append(f"{rule_id} has a bounded gain, expected 'not bounded yet'")
    if fixture.first_question is not None:
        asked = d.questions[0].input if d.questions else None
        if asked != fixture.first_question:
            problems.append(f"expected the first question to ask for {fixture.first_question}, got {asked}")
    for rule_id, leading in sorted(fixture.leads.items()):
        found = [h.leads for h in d.hypotheses if h.rule == rule_id]
        if not found:
            problems.append(f"expected {rule_id} to fire")
        elif found[0] is not leading:
            problems.append(f"{rule_id} {'ranks after the causes' if leading else 'leads'}, expected it {'to lead' if leading else 'after the causes'}")
    errored = {e.rule for e in d.rule_errors}
    problems += [f"expected {r} to raise" for r in fixture.rule_errors if r not in errored]
    problems += [f"rule error {e.rule}: {e.error}" for e in d.rule_errors if e.rule not in fixture.rule_errors]
    return problems


def run_fixtures(diagnosed: list[Diagnosed]) -> list[FixtureResult]:
    return [FixtureResult(file=str(x.file), name=x.fixture.name, problems=problems_of(x.fixture, x.diagnosis)) for x in diagnosed]


def bundled_fixtures() -> Path:
    from importlib import resources

    return Path(str(resources.files("diagnoser.rules.fixtures")))
