"""Find rule sets, check them before they run, and compose them into one engine class.

Rules come from the bundled ``diagnoser.rules`` package, from files given with ``--rules``,
and from the ``diagnoser.rules`` entry-point group. A broken rule is rejected here, at load,
with one line naming the file and the rule: experta would otherwise run it and silently pass
``None`` for a misspelled TEST argument.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import pkgutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

from pydantic import ValidationError

from diagnoser.engine.fact_fields import unknown_field
from diagnoser.engine.facts import INPUTS
from diagnoser.engine.limits import RULE_TIME_LIMIT_S, RuleTimeout, rules_print_to_stderr, time_limit
from diagnoser.engine.spec import PARENT_CAP, PARENT_STEP, RuleSet, RuleSpec
from diagnoser.errors import InputError, nearest
from diagnoser.experta_compat import ANDFC, NOTFC, ORFC, TEST, Fact, KnowledgeEngine, P, Rule
from diagnoser.models.hypothesis import Kind

ENTRY_POINT_GROUP = "diagnoser.rules"


@dataclass
class Rulebook:
    rulesets: list[type] = field(default_factory=list)
    specs: dict[str, RuleSpec] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)  # rule id -> where it was defined
    aliases: dict[str, str] = field(default_factory=dict)  # an id a rule had before a rename -> its id now
    pack_fixtures: list[Path] = field(default_factory=list)  # fixture folders rule packs declare (FIXTURES)
    _engine: Any = field(default=None, repr=False)

    def resolve(self, rule_id: str) -> str:
        """The current id of a rule named by an old one (``rule:key`` ids keep their key)."""
        rule, sep, key = rule_id.partition(":")
        return self.aliases.get(rule, rule) + sep + key

    def engine_class(self) -> type:
        from diagnoser.engine.runner import DiagnosisEngine

        return type("ComposedRules", (*self.rulesets, DiagnosisEngine), {})

    def engine(
        self,
        reference_step_ms: float | None,
        unevaluable: set[str] = frozenset(),
        present: set[str] = frozenset(),
        floor_ms: float | None = None,
    ) -> Any:
        """A reset engine for one diagnosis; the RETE network is built once per rule book."""
        if self._engine is None:
            self._engine = self.engine_class()()
            self._engine.specs = self.specs
        self._engine.start(reference_step_ms, unevaluable, present, floor_ms)
        return self._engine


def rules_of(ruleset: type) -> list[tuple[str, Rule]]:
    return [(name, obj) for name, obj in vars(ruleset).items() if isinstance(obj, Rule)]


def _bound_names(element: Any, names: set[str]) -> None:
    """Variables a pattern binds (MATCH.x, AS.x << Fact(), 'x' << W())."""
    bind = getattr(element, "__bind__", None)
    if isinstance(bind, str):
        names.add(bind)
    if isinstance(element, Fact):
        for key, value in element.items():
            if key != "__bind__":
                _bound_names(value, names)
    elif isinstance(element, tuple) and not isinstance(element, TEST):
        for child in element:
            _bound_names(child, names)


def _constants(test: Any) -> list[float]:
    """The numbers written into a TEST's own code: each is a cut-off without a name, unit or reason."""
    code = getattr(inspect.unwrap(test), "__code__", None)
    return [c for c in (code.co_consts if code else ()) if isinstance(c, (int, float)) and not isinstance(c, bool)]


def fact_patterns(element: Any) -> Iterable[Fact]:
    """Every fact pattern in a rule's conditions, inside AND/OR/NOT too."""
    if isinstance(element, Fact):
        yield element
    elif isinstance(element, tuple) and not isinstance(element, TEST):
        for child in element:
            yield from fact_patterns(child)


def tests_in(element: Any) -> Iterable[Any]:
    if isinstance(element, TEST):
        yield element[0]
    elif isinstance(element, tuple) and not isinstance(element, Fact):
        for child in element:
            yield from tests_in(child)


def field_predicates_in(element: Any) -> Iterable[Any]:
    """The functions a pattern's fields are tested with (``Fact(x=P(...))``, inside NOT or OR too, and joined with a
    binding, ``P(...) & MATCH.x``): they read cut-offs as TESTs do."""
    if isinstance(element, Fact):
        for value in element.values():
            yield from _predicates_of(value)
    elif isinstance(element, tuple):
        for child in element:
            yield from field_predicates_in(child)


def _predicates_of(constraint: Any) -> Iterable[Any]:
    """The predicates in one field's constraint: a P, or Ps combined with &, | and ~ (experta's field constraints
    are tuples of their parts)."""
    if isinstance(constraint, P):
        yield constraint[0]
    elif isinstance(constraint, (ANDFC, ORFC, NOTFC)):
        for part in constraint:
            yield from _predicates_of(part)


def lint_rule(name: str, compiled: Rule) -> list[str]:
    """Problems that would make a rule misfire silently; empty when it is sound."""
    spec = getattr(compiled, "spec", None)
    if not isinstance(spec, RuleSpec):
        return [f"{name}: a plain experta Rule; declare it with diagnoser.engine.rule(spec, ...)"]
    bound: set[str] = set()
    _bound_names(compiled, bound)
    problems = []
    for test in tests_in(compiled):
        unknown = sorted(set(inspect.signature(test).parameters) - bound)
        if unknown:
            problems.append(f"rule {spec.id}: TEST argument(s) {', '.join(unknown)} match no bound variable")
    body_args = list(inspect.signature(compiled.body).parameters)[1:]
    unknown = sorted(set(body_args) - bound - {PARENT_CAP, PARENT_STEP})
    if unknown:
        problems.append(f"rule {spec.id}: body argument(s) {', '.join(unknown)} match no bound variable")
    for test in tests_in(compiled):
        number = next((c for c in _constants(test) if c not in (0, 1)), None)
        if number is not None:
            problems.append(f"rule {spec.id}: bare number {number!r} in a TEST: name it (a module constant with a comment saying why)")
    for pattern in fact_patterns(compiled):
        for key in pattern:
            if not Fact.is_special(key) and isinstance(key, str) and (why := unknown_field(type(pattern), key)):
                problems.append(f"rule {spec.id}: {why}")
    bad_inputs = sorted({name for name in spec.requires if name.partition(".")[0] not in INPUTS})
    if bad_inputs:
        problems.append(f"rule {spec.id}: unknown input(s) {', '.join(bad_inputs)} in requires")
    return problems


def _rulesets_in(module: ModuleType) -> list[type]:
    return [
        obj
        for _, obj in sorted(vars(module).items())
        if inspect.isclass(obj) and issubclass(obj, RuleSet) and obj is not RuleSet and obj.__module__ == module.__name__
    ]


def error_line(err: Exception) -> str:
    """A load failure as one line: the first error of a pydantic report, else the first line."""
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{err.title}: {where + ': ' if where else ''}{first['msg']}"
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise InputError(f"{path}: no such rule file")
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    name = f"diagnoser_user_rules_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"{path}: not a Python rule file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with rules_print_to_stderr(), time_limit(RULE_TIME_LIMIT_S, "loading the file"):
            spec.loader.exec_module(module)
    except (Exception, RuleTimeout, SystemExit) as err:  # noqa: BLE001 - any failure in a user file is bad input
        sys.modules.pop(name, None)
        raise InputError(f"{path}: cannot load rules: {error_line(err)}") from None
    return module


def _bundled_modules() -> list[ModuleType]:
    package = importlib.import_module("diagnoser.rules")
    return [
        importlib.import_module(f"diagnoser.rules.{info.name}")
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name)
        if not info.ispkg and not info.name.startswith("_")
    ]


def _entry_point_modules() -> list[tuple[str, list[type], Path | None]]:
    """Installed rule packs: (where, rule sets, the fixtures folder the pack's module names as FIXTURES)."""
    found = []
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            target = ep.load()
        except Exception as err:  # noqa: BLE001
            raise InputError(f"entry point {ep.name} ({ep.value}): cannot load rules: {error_line(err)}") from None
        rulesets = [target] if inspect.isclass(target) else _rulesets_in(target)
        fixtures = getattr(sys.modules.get(target.__module__ if inspect.isclass(target) else target.__name__), "FIXTURES", None)
        found.append((f"entry point {ep.name}", rulesets, Path(fixtures) if fixtures else None))
    return found


YAML_SUFFIXES = (".yaml", ".yml")


def _yaml_only(folder: Path) -> list[Path]:
    """YAML rule files in a folder: those without a Python module beside them (a module's YAML is its specs)."""
    return sorted(p for p in folder.iterdir() if p.suffix in YAML_SUFFIXES and not p.with_suffix(".py").exists())


def rule_files(paths: Iterable[str | Path]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        files.extend([*sorted(path.glob("*.py")), *_yaml_only(path)] if path.is_dir() else [path])
    return files


def _rulesets_of_file(path: Path) -> list[type]:
    if path.suffix in YAML_SUFFIXES:
        from diagnoser.engine.declarative import load_declarative

        if not path.is_file():
            raise InputError(f"{path}: no such rule file")
        return [load_declarative(path)]
    return _rulesets_in(_import_file(path))


def load_rulebook(extra: Iterable[str | Path] = (), *, bundled: bool = True, entry_points: bool = True) -> Rulebook:
    sources: list[tuple[str, list[type]]] = []
    if bundled:
        sources += [(m.__file__ or m.__name__, _rulesets_in(m)) for m in _bundled_modules()]
        package = Path(importlib.import_module("diagnoser.rules").__file__).parent
        sources += [(str(p), _rulesets_of_file(p)) for p in _yaml_only(package)]
    packs = _entry_point_modules() if entry_points else []
    sources += [(where, rulesets) for where, rulesets, _ in packs]
    sources += [(str(p), _rulesets_of_file(p)) for p in rule_files(extra)]
    book = build_rulebook(sources)
    book.pack_fixtures = [fixtures for _, _, fixtures in packs if fixtures is not None]
    return book


def _check_thresholds_declared(book: Rulebook) -> None:
    """Every cut-off a rule reads is declared in its spec, with the value the rule reads, its unit
    and why: a threshold nobody can see or explain is refused at load."""
    from diagnoser.engine.explain import thresholds_by_rule

    every = thresholds_by_rule(book)
    for rule_id, spec in book.specs.items():
        reads = every[rule_id]
        where = f"{book.origin[rule_id]}: rule {rule_id}"
        undeclared = sorted(set(reads) - set(spec.thresholds))
        if undeclared:
            raise InputError(f"{where}: reads threshold {undeclared[0]} but its spec does not declare it (thresholds: NAME: {{value, unit, why}})")
        for name, declared in spec.thresholds.items():
            if name not in reads:
                raise InputError(f"{where}: declares threshold {name} but never reads it")
            if declared.value != reads[name]:
                raise InputError(f"{where}: threshold {name} is declared {declared.value:g} but the rule reads {reads[name]:g}")


def helpers_of(ruleset: type) -> list[str]:
    """The functions a rule set defines besides its rules (which are Rule objects, not functions)."""
    return [name for name, value in vars(ruleset).items() if inspect.isfunction(value) and not name.startswith("__")]


def build_rulebook(sources: list[tuple[str, list[type]]]) -> Rulebook:
    """Lint every rule set and merge them; the first problem found is raised as bad input."""
    from diagnoser.engine.runner import DiagnosisEngine

    book = Rulebook()
    method_owner: dict[str, str] = {}
    for where, rulesets in sources:
        for ruleset in rulesets:
            if issubclass(ruleset, KnowledgeEngine):
                raise InputError(f"{where}: {ruleset.__name__} must derive from RuleSet, not KnowledgeEngine")
            for name, compiled in rules_of(ruleset):
                problems = lint_rule(name, compiled)
                if problems:
                    raise InputError(f"{where}: {problems[0]}")
                if name in method_owner:
                    raise InputError(f"{where}: rule method {name} already defined in {method_owner[name]}")
                method_owner[name] = f"{where} ({ruleset.__name__})"
                spec = compiled.spec
                known = book.specs.get(spec.id)
                if known is not None and known != spec:
                    raise InputError(f"{where}: rule id {spec.id} already defined in {book.origin[spec.id]}")
                book.specs[spec.id] = spec
                book.origin.setdefault(spec.id, where)
            for name in helpers_of(ruleset):
                # every rule set becomes one class with the engine: a helper of the same name in another rule set, or
                # one of the engine's own, would silently replace it
                if name in method_owner:
                    raise InputError(f"{where}: method {name} of {ruleset.__name__} already defined in {method_owner[name]}")
                if hasattr(DiagnosisEngine, name):
                    raise InputError(f"{where}: method {name} of {ruleset.__name__} would replace the engine's own")
                method_owner[name] = f"{where} ({ruleset.__name__})"
            book.rulesets.append(ruleset)
    for spec in book.specs.values():
        for old in spec.aliases:
            if old in book.specs or book.aliases.get(old, spec.id) != spec.id:
                taken = old if old in book.specs else book.aliases[old]
                raise InputError(f"{book.origin[spec.id]}: rule {spec.id}: alias {old} is already the id or an alias of {taken}")
            book.aliases[old] = spec.id
    _check_thresholds_declared(book)
    for spec in book.specs.values():
        parent = book.specs.get(spec.parent) if spec.parent else None
        if spec.parent and parent is None:
            hint = nearest(spec.parent, sorted(book.specs))
            raise InputError(
                f"{book.origin[spec.id]}: rule {spec.id}: parent {spec.parent} is not a loaded rule" + (f" (nearest: {hint})" if hint else "")
            )
        if parent is not None and parent.kind is not Kind.cause:
            raise InputError(f"{book.origin[spec.id]}: rule {spec.id}: parent {spec.parent} is a {parent.kind.value}, not a cause")
        for relation, others in (("refines", spec.refines), ("follows_from", spec.follows_from)):
            for other in others:
                found = book.specs.get(other)
                if found is None or found.kind is not Kind.cause or other == spec.id:
                    raise InputError(f"{book.origin[spec.id]}: rule {spec.id}: {relation} {other}, which is not another loaded cause")
    _refuse_parent_cycles(book)
    return book


def _refuse_parent_cycles(book: Rulebook) -> None:
    """A rule that is its own parent, or its own grandparent: every walk up the tree (ranking,
    the parent's time cap) would go round without end."""
    for spec in book.specs.values():
        chain, at = [spec.id], spec.parent
        while at in book.specs:
            if at in chain:
                raise InputError(f"{book.origin[spec.id]}: rule {spec.id}: its parents form a cycle ({' -> '.join([*chain, at])})")
            chain.append(at)
            at = book.specs[at].parent
