"""Run the rule base with some cut-offs changed, to see how much a conclusion leans on them.

Rules read their thresholds (UPPER_CASE numeric constants of their module) when a condition is
tested, not when the rule is built. So a sensitivity run sets the constants on the rule modules
for its duration and puts every one back afterwards, whatever happens in between.

    parse_threshold("launch.MIN_PART_SHARE=0.05") -> ("launch.MIN_PART_SHARE", 0.05)
    with thresholds_set(rulebook, {"launch.MIN_PART_SHARE": 0.05}): diagnose(...)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from diagnoser.engine.loader import Rulebook
from diagnoser.errors import InputError


def parse_threshold(text: str) -> tuple[str, float]:
    key, sep, value = text.partition("=")
    if not sep or "." not in key:
        raise InputError(f"--threshold {text!r}: expected RULE.NAME=VALUE or MODULE.NAME=VALUE, e.g. launch.MIN_PART_SHARE=0.05")
    try:
        number = float(value)
    except ValueError:
        raise InputError(f"--threshold {key.strip()}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise InputError(f"--threshold {key.strip()}: {value!r} is not a finite number")
    return key.strip(), number


def rule_modules(rulebook: Rulebook) -> dict[str, ModuleType]:
    """Rule modules by the short name an expert types: the file's stem (launch, guards, mine),
    or the full module name where two files share a stem."""
    modules: dict[str, ModuleType] = {}
    for ruleset in rulebook.rulesets:
        module = sys.modules[ruleset.__module__]
        stem = _short_name(module)
        modules[stem if modules.get(stem, module) is module else module.__name__] = module
    return modules


def _short_name(module: ModuleType) -> str:
    return Path(module.__file__ or module.__name__).stem


def is_threshold(name: str, value: object) -> bool:
    """A rule threshold is an UPPER_CASE number at module level (True and False are not numbers here)."""
    return name.isupper() and isinstance(value, (int, float)) and not isinstance(value, bool)


def _thresholds(module: ModuleType) -> list[str]:
    return sorted(n for n, v in vars(module).items() if is_threshold(n, v))


def _declared(rulebook: Rulebook, settings: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """The settings that name a YAML rule's declared threshold (RULE.NAME, an old id too): the overrides
    under the rule's current id, and each setting's value in the rules under the key as given."""
    chosen, before = {}, {}
    for key, value in settings.items():
        rule_id, _, name = key.partition(".")
        spec = rulebook.specs.get(rulebook.resolve(rule_id))
        if spec is None or not spec.thresholds:
            continue
        if name not in spec.thresholds:
            raise InputError(f"--threshold {key}: rule {rule_id} has no threshold {name!r} (thresholds: {', '.join(sorted(spec.thresholds))})")
        chosen[f"{spec.id}.{name}"], before[key] = value, spec.thresholds[name].value
    return chosen, before


@contextmanager
def thresholds_set(rulebook: Rulebook, settings: dict[str, float]) -> Iterator[dict[str, float]]:
    """Set the thresholds, yield what they were before, and restore them on the way out.

    A YAML rule's threshold (RULE.NAME) is a per-run override its test reads from a context
    variable, so nothing outside this run changes; a Python rule module's constant
    (MODULE.NAME) is set on the module for the run and put back afterwards."""
    from diagnoser.engine.declarative import threshold_overrides

    declared, before_declared = _declared(rulebook, settings)
    modules = rule_modules(rulebook)
    targets = []
    for key, value in settings.items():
        if key in before_declared:
            continue
        module_name, _, name = key.partition(".")
        module = modules.get(module_name)
        if module is None:
            raise InputError(f"--threshold {key}: no rule module {module_name!r} (modules: {', '.join(sorted(modules))})")
        if name not in _thresholds(module):
            known = ", ".join(_thresholds(module)) or "none"
            raise InputError(f"--threshold {key}: {module_name} has no threshold {name!r} (thresholds: {known})")
        targets.append((module, name, value))
    names = {id(m): key for key, m in modules.items()}
    before = {f"{names[id(m)]}.{n}": getattr(m, n) for m, n, _ in targets}
    saved = [(m, n, getattr(m, n)) for m, n, _ in targets]
    token = threshold_overrides.set({**threshold_overrides.get(), **declared})
    try:
        for module, name, value in targets:
            setattr(module, name, value)
        yield {**before_declared, **before}
    finally:
        threshold_overrides.reset(token)
        for module, name, old in reversed(saved):
            setattr(module, name, old)
