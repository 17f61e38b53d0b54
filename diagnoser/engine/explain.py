"""Why a rule did or did not conclude on a case, condition by condition.

The question a rule author asks most is "why is my rule silent here?". experta answers only
with what fired, so this replays each of the rule's patterns over the facts the engine held
after its run (parents' ``Holds`` included) and keeps the furthest partial match: the
conditions that held with their values, then the first that failed and why (no such fact, a
field the case never measured, a literal or predicate that did not match, a test that was
false for the bound values). It reads the same patterns the engine runs, so it cannot drift
from them.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from diagnoser.engine.facts import Holds, Unevaluable
from diagnoser.engine.loader import Rulebook, field_predicates_in, rules_of, tests_in
from diagnoser.engine.runner import run_engine
from diagnoser.engine.overrides import is_threshold
from diagnoser.errors import InputError
from diagnoser.experta_compat import AND, ANDFC, NOT, NOTFC, OR, ORFC, TEST, Fact, L, P, W
from diagnoser.models.case import Case
from diagnoser.models.explanation import BodyExplanation, ConditionResult, RuleExplanation

Trace = list[ConditionResult]


def explain_rules(case: Case, rulebook: Rulebook, rule_ids: Iterable[str]) -> list[RuleExplanation]:
    """One engine run over the case, then each rule's conditions replayed over its facts."""
    rule_ids = [rulebook.resolve(r) for r in rule_ids]
    unknown = [r for r in rule_ids if r not in rulebook.specs]
    if unknown:
        raise InputError(f"no rule {unknown[0]!r}; `diagnoser rules list` shows the ids")
    engine, bound, _ = run_engine(case, rulebook)
    facts = list(engine.facts.values())
    present = engine.present
    compiled = [(name, rule) for ruleset in rulebook.rulesets for name, rule in rules_of(ruleset)]
    explanations = []
    for rule_id in rule_ids:
        spec = rulebook.specs[rule_id]
        produced = [h.id for h in engine.found if h.rule == rule_id]
        error = next((e.error for e in engine.errors if e.rule == rule_id), None)
        outcome = "concluded" if produced else "raised" if error else "declined" if rule_id in engine.fired else "silent"
        bodies = [_explain_body(name, rule, facts) for name, rule in compiled if rule.spec.id == rule_id]
        explanations.append(
            RuleExplanation(
                rule=spec.id,
                kind=spec.kind,
                title=spec.title,
                parent=spec.parent,
                requires=list(spec.requires),
                missing_inputs=[name for name in spec.requires if name not in present],
                outcome=outcome,
                hypotheses=produced,
                error=error,
                bodies=bodies,
                stopped_at=_stopped_at(bodies),
            )
        )
    return explanations


def _explain_body(name: str, compiled: Any, facts: list[Fact]) -> BodyExplanation:
    matched, trace = _solve(list(compiled), 0, {}, facts)
    return BodyExplanation(body=name, defined_at=_defined_at(compiled.body), matched=matched, conditions=trace)


def _defined_at(func: Any) -> str:
    """file:line of a Python body or test; file:rule of a YAML rule's."""
    declared = getattr(func, "__defined_at__", None)
    if declared is not None:
        return declared
    return f"{Path(inspect.getsourcefile(func) or '?').name}:{inspect.getsourcelines(func)[1]}"


def _solve(conditions: list[Any], index: int, bindings: dict[str, Any], facts: list[Fact]) -> tuple[bool, Trace]:
    """Depth-first over the conditions; on failure, the trace that got furthest."""
    if index == len(conditions):
        return True, []
    element = conditions[index]
    if isinstance(element, AND):
        return _solve(conditions[:index] + list(element) + conditions[index + 1 :], index, bindings, facts)
    if isinstance(element, OR):
        traces = []
        for branch in element:
            branch_list = list(branch) if isinstance(branch, AND) else [branch]
            ok, trace = _solve(conditions[:index] + branch_list + conditions[index + 1 :], index, bindings, facts)
            if ok:
                return True, trace
            traces.append(trace)
        best = max(traces, key=_progress)
        if _progress(best)[0]:
            return False, best
        # every alternative failed at its first condition: say so for each, on one line
        label = " OR ".join(t[0].condition for t in traces)
        return False, [ConditionResult(condition=label, holds=False, detail="; ".join(t[0].detail for t in traces))]
    if isinstance(element, TEST):
        return _solve_test(conditions, index, element[0], bindings, facts)
    if isinstance(element, NOT):
        return _solve_not(conditions, index, element[0], bindings, facts)
    return _solve_fact(conditions, index, element, bindings, facts)


def _progress(trace: Trace) -> tuple[int, int]:
    return sum(c.holds for c in trace), len(trace)


def _stopped_at(bodies: list[BodyExplanation]) -> str:
    """The condition a rule stopped at, in the way to conclude that got furthest."""
    if not bodies:
        return ""
    furthest = max(bodies, key=lambda b: _progress(b.conditions))
    failed = next((c for c in furthest.conditions if not c.holds), None)
    return f"{failed.condition}: {failed.detail}" if failed else ""


def _names_read(code: Any) -> list[str]:
    """The global names a function reads, those of its comprehensions and generator expressions (code of their own)
    included."""
    nested = [name for const in code.co_consts if inspect.iscode(const) for name in _names_read(const)]
    return [*code.co_names, *nested]


def thresholds_used(func: Any, depth: int = 2) -> dict[str, float]:
    """The module constants (UPPER_CASE numbers) a TEST reads, directly or through a helper
    function of its module, so a verdict can show the cut-offs it was judged against."""
    found: dict[str, float] = {}
    func = inspect.unwrap(func)
    declared = getattr(func, "__thresholds__", None)
    if declared is not None:  # a YAML rule's test: its declared thresholds, as this run sees them
        return declared()
    module = getattr(func, "__globals__", {})
    for name in _names_read(func.__code__):
        value = module.get(name)
        if is_threshold(name, value):
            found[name] = value
        elif depth and inspect.isfunction(value) and value.__module__ == func.__module__:
            found.update(thresholds_used(value, depth - 1))
    return dict(sorted(found.items()))


def thresholds_by_rule(rulebook: Rulebook) -> dict[str, dict[str, float]]:
    """Every cut-off each rule's tests and bodies read, over all the ways it can conclude."""
    found: dict[str, dict[str, float]] = {rule_id: {} for rule_id in rulebook.specs}
    for ruleset in rulebook.rulesets:
        for _, compiled in rules_of(ruleset):
            reads = found[compiled.spec.id]
            for test in (*tests_in(compiled), *field_predicates_in(compiled)):
                reads.update(thresholds_used(test))
            if getattr(compiled.body, "__code__", None) is not None:
                reads.update(thresholds_used(compiled.body))
    return {rule_id: dict(sorted(reads.items())) for rule_id, reads in found.items()}


def rule_thresholds(rulebook: Rulebook, rule_id: str) -> dict[str, float]:
    return thresholds_by_rule(rulebook)[rule_id]


def _solve_test(conditions: list[Any], index: int, test: Any, bindings: dict[str, Any], facts: list[Fact]) -> tuple[bool, Trace]:
    test = inspect.unwrap(test)  # the rule's own function, not the engine's fail-closed guard
    names = list(inspect.signature(test).parameters)
    shows = getattr(test, "__shows__", None)  # a YAML rule's test shows the fields it compares
    values = shows(bindings) if shows else ", ".join(f"{n}={_show(bindings.get(n))}" for n in names)
    cutoffs = thresholds_used(test)
    if cutoffs:
        values += " (" + ", ".join(f"{k}={_show(v)}" for k, v in cutoffs.items()) + ")"
    label = f"TEST({', '.join(names)}) at {_defined_at(test)}"
    try:
        holds = test(**{n: bindings.get(n) for n in names})
    except Exception as err:  # noqa: BLE001 - the engine failed this TEST closed; say why
        return False, [ConditionResult(condition=label, holds=False, detail=f"raised {type(err).__name__}: {err} for {values}")]
    if not holds:
        return False, [ConditionResult(condition=label, holds=False, detail=f"false for {values}")]
    ok, rest = _solve(conditions, index + 1, bindings, facts)
    return ok, [ConditionResult(condition=label, holds=True, detail=f"true for {values}"), *rest]


def _solve_not(conditions: list[Any], index: int, pattern: Any, bindings: dict[str, Any], facts: list[Fact]) -> tuple[bool, Trace]:
    label = f"NOT {_describe(pattern)}"
    blocking = next((f for f in _candidates(pattern, facts) if _match_fact(pattern, f, bindings)[0] is not None), None)
    if blocking is not None:
        return False, [ConditionResult(condition=label, holds=False, detail=f"the case has {_show_fact(blocking, pattern)}")]
    ok, rest = _solve(conditions, index + 1, bindings, facts)
    return ok, [ConditionResult(condition=label, holds=True, detail=f"no {type(pattern).__name__} matches"), *rest]


def _solve_fact(conditions: list[Any], index: int, pattern: Fact, bindings: dict[str, Any], facts: list[Fact]) -> tuple[bool, Trace]:
    label = _describe(pattern)
    candidates = _candidates(pattern, facts)
    if not candidates:
        return False, [ConditionResult(condition=label, holds=False, detail=_absent(pattern))]
    best: Trace = []
    reasons = []
    for fact in candidates:
        extended, why = _match_fact(pattern, fact, bindings)
        if extended is None:
            reasons.append(why)
            continue
        ok, rest = _solve(conditions, index + 1, extended, facts)
        trace = [ConditionResult(condition=label, holds=True, detail=_show_fact(fact, pattern)), *rest]
        if ok:
            return True, trace
        best = max(best, trace, key=_progress)
    if best:
        return False, best
    return False, [ConditionResult(condition=label, holds=False, detail="; ".join(dict.fromkeys(reasons)))]


def _candidates(pattern: Fact, facts: Iterable[Fact]) -> list[Fact]:
    """Facts of the pattern's class; for a parent's Holds, only that parent's (the others are noise)."""
    same = [f for f in facts if type(f) is type(pattern)]
    if isinstance(pattern, (Holds, Unevaluable)) and isinstance(pattern.get("rule"), str):
        return [f for f in same if f.get("rule") == pattern["rule"]]
    return same


def _absent(pattern: Fact) -> str:
    if isinstance(pattern, Holds) and isinstance(pattern.get("rule"), str):
        return f"cause {pattern['rule']} did not conclude"
    if isinstance(pattern, Unevaluable) and isinstance(pattern.get("rule"), str):
        return f"cause {pattern['rule']} has its inputs, so it decides"
    return f"the case has no {type(pattern).__name__} fact"


def _match_fact(pattern: Fact, fact: Fact, bindings: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The bindings extended by this fact, or None and the first field that does not fit."""
    extended = dict(bindings)
    for key, constraint in pattern.items():
        if Fact.is_special(key):
            continue
        if key not in fact:
            return None, f"{key} was not measured"
        ok, why = _constraint(constraint, fact[key], extended)
        if not ok:
            return None, f"{key}={_show(fact[key])} {why}"
    if isinstance(pattern.__bind__, str):
        extended[pattern.__bind__] = fact
    return extended, ""


def _constraint(constraint: Any, value: Any, bindings: dict[str, Any]) -> tuple[bool, str]:
    """Does the field value satisfy the constraint? Binds MATCH names as experta would."""
    if isinstance(constraint, ANDFC):
        for part in constraint:
            ok, why = _constraint(part, value, bindings)
            if not ok:
                return False, why
        ok, why = True, ""
    elif isinstance(constraint, ORFC):
        ok = any(_constraint(part, value, dict(bindings))[0] for part in constraint)
        why = "matches none of the alternatives"
    elif isinstance(constraint, NOTFC):
        ok, why = not _constraint(constraint[0], value, dict(bindings))[0], "matches what the pattern excludes"
    elif isinstance(constraint, W):
        ok, why = True, ""
    elif isinstance(constraint, L):
        ok, why = value == constraint.value, f"is not {_show(constraint.value)}"
    elif isinstance(constraint, P):
        try:
            ok, why = bool(inspect.unwrap(constraint.match)(value)), "fails the predicate"
        except Exception as err:  # noqa: BLE001 - the engine failed this predicate closed; say why
            ok, why = False, f"raised {type(err).__name__}: {err} in the predicate"
    else:
        ok, why = value == constraint, f"is not {_show(constraint)}"
    name = getattr(constraint, "__bind__", None)
    if ok and isinstance(name, str):
        if name in bindings and bindings[name] != value:
            return False, f"differs from {name}={_show(bindings[name])} bound earlier"
        bindings[name] = value
    return ok, why


def _describe(pattern: Fact) -> str:
    fields = ", ".join(f"{k}={_describe_constraint(v)}" for k, v in pattern.items() if not Fact.is_special(k))
    prefix = f"{pattern.__bind__} << " if isinstance(pattern.__bind__, str) else ""
    return f"{prefix}{type(pattern).__name__}({fields})"


def _describe_constraint(constraint: Any) -> str:
    name = getattr(constraint, "__bind__", None)
    if isinstance(constraint, W):
        return f"?{name}" if name else "?"
    if isinstance(constraint, L):
        return repr(constraint.value)
    if isinstance(constraint, P):
        return "P(...)" + (f" as ?{name}" if name else "")
    if isinstance(constraint, (ANDFC, ORFC)):
        joiner = " & " if isinstance(constraint, ANDFC) else " | "
        return joiner.join(_describe_constraint(c) for c in constraint)
    if isinstance(constraint, NOTFC):
        return f"~{_describe_constraint(constraint[0])}"
    return repr(constraint)


def _show_fact(fact: Fact, pattern: Fact) -> str:
    fields = ", ".join(f"{k}={_show(fact[k])}" for k in pattern if not Fact.is_special(k) and k in fact)
    return f"{type(fact).__name__}({fields})" if fields else f"a {type(fact).__name__} fact"


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Fact):
        return type(value).__name__
    return repr(value)
