"""Run the rule base with some cut-offs changed, to see how much a conclusion leans on them.

Rules read their thresholds (UPPER_CASE numeric constants of their module, or a YAML rule's
declared ones) when a condition is tested, through this run's overrides; so a sensitivity run
changes nothing outside itself, and two runs in one process may use different values.

    parse_threshold("launch.MIN_PART_SHARE=0.05") -> ("launch.MIN_PART_SHARE", 0.05)
    with thresholds_set(rulebook, {"launch-gaps.MIN_PART_SHARE": 0.05}): diagnose(...)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from diagnoser.engine.loader import Rulebook
from diagnoser.engine.overrides import is_threshold, threshold_overrides
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
        if hasattr(ruleset, "yaml_source"):  # a YAML rule's thresholds are its own (RULE.NAME)
            continue
        module = sys.modules[ruleset.__module__]
        stem = _short_name(module)
        modules[stem if modules.get(stem, module) is module else module.__name__] = module
    return modules


def _short_name(module: ModuleType) -> str:
    return Path(module.__file__ or module.__name__).stem


def _thresholds(module: ModuleType) -> list[str]:
    return sorted(n for n, v in vars(module).items() if is_threshold(n, v))


def _rule_setting(rulebook: Rulebook, key: str) -> tuple[str, float] | None:
    """RULE.NAME (an old id too): the override key under the rule's current id, and the value the rule reads now."""
    from diagnoser.engine.explain import rule_thresholds

    rule_id, _, name = key.partition(".")
    rule_id = rulebook.resolve(rule_id)
    if rule_id not in rulebook.specs:
        return None
    reads = rule_thresholds(rulebook, rule_id)
    if name not in reads:
        known = ", ".join(sorted(reads)) or "none"
        raise InputError(f"--threshold {key}: rule {rule_id} has no threshold {name!r} (thresholds: {known})")
    return f"{rule_id}.{name}", reads[name]


def _module_setting(modules: dict[str, ModuleType], key: str) -> tuple[str, float]:
    module_name, _, name = key.partition(".")
    module = modules.get(module_name)
    if module is None:
        raise InputError(f"--threshold {key}: no rule or rule module {module_name!r} (modules: {', '.join(sorted(modules))})")
    if name not in _thresholds(module):
        known = ", ".join(_thresholds(module)) or "none"
        raise InputError(f"--threshold {key}: {module_name} has no threshold {name!r} (thresholds: {known})")
    return f"{module.__name__}.{name}", getattr(module, name)


@contextmanager
def thresholds_set(rulebook: Rulebook, settings: dict[str, float]) -> Iterator[dict[str, float]]:
    """Override thresholds for this run, yield what they were, and drop the overrides on the way out.

    ``RULE.NAME`` changes what one rule reads; ``MODULE.NAME`` what every rule of that module
    reads. Nothing is assigned anywhere: rules read thresholds through ``threshold_overrides``
    (``diagnoser.engine.overrides``), which holds them for this context only.
    """
    modules = rule_modules(rulebook)
    chosen, before = {}, {}
    for key, value in settings.items():
        target = _rule_setting(rulebook, key) or _module_setting(modules, key)
        chosen[target[0]], before[key] = value, target[1]
    token = threshold_overrides.set({**threshold_overrides.get(), **chosen})
    try:
        yield before
    finally:
        threshold_overrides.reset(token)
