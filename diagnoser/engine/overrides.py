"""This run's threshold overrides, seen by every rule without changing any module.

A Python rule reads its cut-offs as module constants (``MIN_SHARE``) when a test runs. Each
rule's tests, predicates and body are rebound, once, to globals that look a name up in the live
module and, for an UPPER_CASE number, in this run's overrides first: ``RULE.NAME`` for that rule
alone, else ``module.NAME`` for every rule of the module. A YAML rule's declared thresholds read
the same mapping. Two runs in one process with different overrides see different values, and
no module attribute is ever assigned.
"""

from __future__ import annotations

from contextvars import ContextVar
from types import FunctionType
from typing import Any

# "rule-id.NAME" or "module.name.NAME" -> value, for the current run.
threshold_overrides: ContextVar[dict[str, float]] = ContextVar("threshold_overrides", default={})


def is_threshold(name: str, value: object) -> bool:
    """A rule threshold is an UPPER_CASE number at module level (True and False are not numbers here)."""
    return name.isupper() and isinstance(value, (int, float)) and not isinstance(value, bool)


def current(rule_id: str, module_name: str, name: str, value: float) -> float:
    table = threshold_overrides.get()
    return table.get(f"{rule_id}.{name}", table.get(f"{module_name}.{name}", value))


class _RuleGlobals(dict):
    """A function's globals through this run's overrides; every read falls through to the live module.

    CPython reads a non-dict-exact globals mapping with ``__getitem__``, so the storage stays
    empty but for ``__builtins__``, and later module definitions (helpers below the class) are
    found as in the module itself.
    """

    def __init__(self, module: dict[str, Any], rule_id: str) -> None:
        super().__init__()
        dict.__setitem__(self, "__builtins__", module.get("__builtins__", __builtins__))
        self.module, self.rule_id = module, rule_id
        self.module_name = module.get("__name__", "")

    def __getitem__(self, name: str) -> Any:
        value = self.module[name]
        if is_threshold(name, value):
            return current(self.rule_id, self.module_name, name, value)
        if isinstance(value, FunctionType):
            return rebind(value, self.rule_id)
        return value

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        return name in self.module


_rebound: dict[tuple[int, str], FunctionType] = {}


def rebind(func: Any, rule_id: str) -> Any:
    """``func`` reading its module through this run's overrides for ``rule_id`` (helpers it calls too)."""
    if not isinstance(func, FunctionType) or isinstance(func.__globals__, _RuleGlobals):
        return func
    key = (id(func), rule_id)
    found = _rebound.get(key)
    if found is None:
        found = FunctionType(func.__code__, _RuleGlobals(func.__globals__, rule_id), func.__name__, func.__defaults__, func.__closure__)
        found.__kwdefaults__ = func.__kwdefaults__
        found.__qualname__, found.__doc__, found.__module__ = func.__qualname__, func.__doc__, func.__module__
        found.__dict__.update(func.__dict__)
        found.__rebound_from__ = func  # keeps the original (and so its id) alive with the cache entry
        _rebound[key] = found
    return found
