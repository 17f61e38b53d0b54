"""Rules written entirely in YAML: a condition over named fact fields, compiled to experta rules.

A performance expert writes what they would say: the facts and fields it reads, the cut-offs
with their reasons, the time it claims. The loader checks every name against the declared
fact fields and the rule's own thresholds, refuses bare numbers (a cut-off without a name has
no reason attached), and compiles the condition to experta patterns plus one test, so the
experta engine stays the only engine. A threshold is read when the test runs, from the rule's
declared value or this run's override: no module state changes for a sensitivity run.

    launch-share:
      title: ...
      thresholds: {MIN_SHARE: {value: 0.08, unit: fraction, why: below it timer noise}}
      when: Budget.launch_ms >= MIN_SHARE * Budget.step_ms
      claims: Budget.launch_ms          # or `parent` (the parent's time), or omit: no time claimed
      evidence: [Budget.launch_ms]      # default: every field the condition and claim name
"""

from __future__ import annotations

import ast
import inspect
import math
import operator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from diagnoser.engine.fact_fields import SECTION, fact_table, unknown_field
from diagnoser.engine.overrides import threshold_overrides
from diagnoser.engine.spec import PARENT_CAP, Finding, RuleSet, RuleSpec, ev, rule
from diagnoser.errors import InputError, nearest
from diagnoser.experta_compat import AS, NOT, TEST, W, Rule
from diagnoser.models.documents import load_document, validation_message


# The only numbers a condition may hold: anything else is a cut-off and must be a named threshold.
PLAIN_NUMBERS = (0, 1)
# A condition is a line or two; these bound what a hostile rule pack can make the checker and the
# evaluator (both recursive) walk: far past any real rule, far below Python's recursion limit.
MAX_CONDITION_CHARS = 2_000
MAX_CONDITION_NODES = 300
MAX_CONDITION_DEPTH = 40
DECLARATIVE_KEYS = ("when", "claims", "evidence", "key")

_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


class _Unmeasured(Exception):
    """A field the condition compares was not measured: the condition is false (it fails closed)."""


@dataclass
class _Names:
    """What one expression reads: fact fields (compared, or only tested for presence) and thresholds."""

    compared: list[tuple[str, str]] = field(default_factory=list)
    presence: list[tuple[str, str]] = field(default_factory=list)
    thresholds: list[str] = field(default_factory=list)


class _Checker(ast.NodeVisitor):
    """Walks a parsed expression, refusing anything outside the small documented language."""

    def __init__(self, where: str, declared: dict[str, float], facts: dict[str, type]) -> None:
        self.where, self.declared, self.facts = where, declared, facts
        self.names = _Names()
        self._in_presence = False

    def fail(self, message: str) -> None:
        raise InputError(f"{self.where}: {message}")

    def generic_visit(self, node: ast.AST) -> None:
        allowed = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.Compare,
                   ast.BinOp, ast.Load, *_COMPARE, *_ARITHMETIC)
        if not isinstance(node, allowed):
            self.fail(f"{type(node).__name__} is not allowed in a condition (comparisons, and/or/not, + - * /, "
                      "Fact.field, THRESHOLD, present(Fact.field), absent(Fact.field), 'text', true/false)")
        super().generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return
        if value not in PLAIN_NUMBERS:
            self.fail(f"bare number {value!r}: name it under thresholds (with its unit and why); only 0 and 1 may stand alone")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in ("true", "false", "True", "False"):
            return
        if node.id in self.facts:
            self.fail(f"{node.id} needs a field: {node.id}.FIELD")
        if node.id not in self.declared:
            hint = nearest(node.id, sorted(self.declared)) or nearest(node.id, sorted(self.facts))
            self.fail(f"unknown threshold {node.id!r}" + (f" (nearest: {hint})" if hint else "") + "; declare it under thresholds")
        self.names.thresholds.append(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not isinstance(node.value, ast.Name):
            self.fail("a field is written Fact.field")
        pair = _resolve(node.value.id, node.attr, self.where, self.facts)
        target = self.names.presence if self._in_presence else self.names.compared
        if pair not in target:
            target.append(pair)

    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in ("present", "absent") or len(node.args) != 1 or not isinstance(node.args[0], ast.Attribute) or node.keywords:
            self.fail("the only calls are present(Fact.field) and absent(Fact.field)")
        self._in_presence = True
        self.visit(node.args[0])
        self._in_presence = False


def _parse(text: Any, where: str, declared: dict[str, float], facts: dict[str, type]) -> tuple[ast.Expression, _Names]:
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{where}: expected an expression")
    if len(text) > MAX_CONDITION_CHARS:
        raise InputError(f"{where}: longer than {MAX_CONDITION_CHARS:,} characters; split the rule")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise InputError(f"{where}: not a valid expression: {err.msg}") from None
    except (RecursionError, MemoryError):
        raise InputError(f"{where}: nested too deeply") from None
    _refuse_large(tree, where)
    checker = _Checker(where, declared, facts)
    checker.visit(tree)
    return tree, checker.names


def _refuse_large(tree: ast.AST, where: str) -> None:
    """Too many terms or too deep a nesting (900 chained ``and``s or ``not``s), checked without recursion."""
    count, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_CONDITION_NODES or depth > MAX_CONDITION_DEPTH:
            raise InputError(f"{where}: more than {MAX_CONDITION_NODES} terms or {MAX_CONDITION_DEPTH} levels of nesting; split the rule")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _arithmetic(op: ast.operator, left: Any, right: Any) -> float:
    """Arithmetic on numbers only (text times a case's batch would build a string without bound);
    a division by zero is NaN, which no comparison holds for and no claim may carry."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
        raise InputError(f"arithmetic on {type(left).__name__} and {type(right).__name__}: conditions compute with numbers only")
    try:
        return _ARITHMETIC[type(op)](left, right)
    except ZeroDivisionError:
        return float("nan")


def _evaluate(node: ast.AST, bound: dict[str, Any], thresholds: Callable[[str], float]) -> Any:
    """The expression's value over the bound facts; a compared field that was not measured raises _Unmeasured."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, bound, thresholds)
    if isinstance(node, ast.BoolOp):
        values = (_evaluate(v, bound, thresholds) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, bound, thresholds)
        return (not value) if isinstance(node.op, ast.Not) else -value
    if isinstance(node, ast.Compare):
        left = _evaluate(node.left, bound, thresholds)
        for op, right_node in zip(node.ops, node.comparators):
            right = _evaluate(right_node, bound, thresholds)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BinOp):
        return _arithmetic(node.op, _evaluate(node.left, bound, thresholds), _evaluate(node.right, bound, thresholds))
    if isinstance(node, ast.Call):
        arg = node.args[0]
        fact = bound.get(arg.value.id)
        has = fact is not None and arg.attr in fact
        return has if node.func.id == "present" else not has
    if isinstance(node, ast.Attribute):
        fact = bound.get(node.value.id)
        if fact is None or node.attr not in fact:
            raise _Unmeasured(f"{node.value.id}.{node.attr}")
        return fact[node.attr]
    if isinstance(node, ast.Name):
        if node.id in ("true", "True"):
            return True
        if node.id in ("false", "False"):
            return False
        return thresholds(node.id)
    return node.value  # ast.Constant


def _with_signature(func: Callable[..., Any], names: list[str], where: str) -> Callable[..., Any]:
    """experta and the explainer read a test's or body's parameter names from its signature."""
    func.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    func.__defined_at__ = where
    return func


def _evidence_name(fact: str, attr: str) -> str:
    """Evidence names say where in the case a value came from, as the Python rules' do."""
    return f"{SECTION.get(fact, fact.lower())}.{attr}"


def compile_rule(rule_id: str, raw: dict[str, Any], source: Path) -> Rule:
    """One YAML rule as an experta rule carrying its spec; any bad name is one line naming file and rule."""
    where = f"{source}: rule {rule_id}"
    body_fields = {k: raw[k] for k in DECLARATIVE_KEYS if k in raw}
    spec_fields = {k: v for k, v in raw.items() if k not in DECLARATIVE_KEYS}
    if "when" not in body_fields:
        raise InputError(f"{where}: a YAML-only rule needs a when: condition")
    try:
        spec = RuleSpec.model_validate({"id": rule_id, **spec_fields})
    except ValidationError as err:
        raise InputError(validation_message(err, where)) from None
    declared = {name: t.value for name, t in spec.thresholds.items()}
    facts = {cls.__name__: cls for cls in fact_table()}
    condition, names = _parse(body_fields["when"], f"{where}: when", declared, facts)
    claim = body_fields.get("claims")
    claim_tree = None
    if claim is not None and claim != "parent":
        claim_tree, claim_names = _parse(str(claim), f"{where}: claims", declared, facts)
        names.compared += [p for p in claim_names.compared if p not in names.compared]
    if claim == "parent" and not spec.parent:
        raise InputError(f"{where}: claims: parent needs a parent:")
    evidence = [_field_ref(e, f"{where}: evidence", facts) for e in body_fields.get("evidence", [])] or names.compared
    key = _field_ref(body_fields["key"], f"{where}: key", facts) if "key" in body_fields else None

    # Facts the rule reads values from are bound, with every compared field required (a missing
    # one is "not measured": the condition fails closed, and `rules explain` says which field).
    # A fact named only in present()/absent() is bound when present() names it (it must exist);
    # named only in absent(), it becomes a NOT pattern: no such fact carries that field.
    read = sorted({f for f, _ in names.compared + evidence + ([key] if key else [])})
    checked = sorted({f for f, _ in names.presence} - set(read))
    present_only = [f for f in checked if any(f == g for g, _ in _calls(condition, "present"))]
    absent_only = [f for f in checked if f not in present_only]
    aliases = {fact: f"fact_{fact.lower()}" for fact in read + present_only}
    patterns: list[Any] = []
    for fact in read:
        required = {attr: W() for f, attr in names.compared if f == fact}
        patterns.append(getattr(AS, aliases[fact]) << facts[fact](**required))
    patterns += [getattr(AS, aliases[fact]) << facts[fact]() for fact in present_only]
    patterns += [NOT(facts[f](**{attr: W()})) for f, attr in names.presence if f in absent_only]

    def threshold(name: str) -> float:
        return threshold_overrides.get().get(f"{rule_id}.{name}", declared[name])

    bound_names = [aliases[f] for f in read + present_only]
    by_fact = {alias: fact for fact, alias in aliases.items()}

    def facts_of(values: dict[str, Any]) -> dict[str, Any]:
        return {by_fact[alias]: value for alias, value in values.items() if alias in by_fact}

    def test(**values: Any) -> bool:
        try:
            return bool(_evaluate(condition, facts_of(values), threshold))
        except _Unmeasured:
            return False

    test.__thresholds__ = lambda: {n: threshold(n) for n in sorted(set(names.thresholds))}

    def shows(values: dict[str, Any]) -> str:
        bound = facts_of(values)
        return ", ".join(
            f"{f}.{attr}={bound[f][attr]:.4g}" if isinstance(bound[f][attr], float) else f"{f}.{attr}={bound[f][attr]!r}"
            for f, attr in names.compared if f in bound and attr in bound[f]
        )

    test.__shows__ = shows
    patterns.insert(len(read) + len(present_only), TEST(_with_signature(test, bound_names, f"{source.name}:{rule_id}")))

    def body(engine: Any, **values: Any) -> Finding:
        bound = facts_of(values)
        removable = values.get(PARENT_CAP) if claim == "parent" else (
            float(_evaluate(claim_tree, bound, threshold)) if claim_tree is not None else None
        )
        if removable is not None and not math.isfinite(removable):
            raise InputError(f"{where}: claims a time that is not a finite number (a division by zero or an overflow)")
        found = [ev(_evidence_name(f, attr), bound[f][attr]) for f, attr in evidence if f in bound and attr in bound[f]]
        return Finding(evidence=found, removable_ms=removable, key=str(bound[key[0]][key[1]]) if key else "")

    body.__name__ = body.__qualname__ = f"yaml_{rule_id.replace('-', '_')}"
    compiled = rule(spec, *patterns)(_with_signature(body, ["self", *bound_names, PARENT_CAP], f"{source.name}:{rule_id}"))
    compiled.declarative_source = str(source)
    return compiled


def _calls(tree: ast.AST, name: str) -> list[tuple[str, str]]:
    """The (fact, field) pairs a condition passes to present() or absent()."""
    return [
        (node.args[0].value.id, node.args[0].attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    ]


def _resolve(fact: str, attr: str, where: str, facts: dict[str, type]) -> tuple[str, str]:
    """(fact, field) when both exist; else one line naming the nearest valid one."""
    if fact not in facts:
        hint = nearest(fact, sorted(facts))
        raise InputError(f"{where}: unknown fact {fact!r}" + (f" (nearest: {hint})" if hint else ""))
    complaint = unknown_field(facts[fact], attr)
    if complaint:
        raise InputError(f"{where}: {complaint}")
    return fact, attr


def _field_ref(text: Any, where: str, facts: dict[str, type]) -> tuple[str, str]:
    fact, dot, attr = str(text).partition(".")
    if not dot:
        raise InputError(f"{where}: expected Fact.field, got {text!r}")
    return _resolve(fact, attr, where, facts)


def load_declarative(path: Path) -> type:
    """A YAML rule file as one RuleSet class (its rules are methods named after their ids)."""
    data = load_document(path)
    if not isinstance(data, dict) or not data:
        raise InputError(f"{path}: expected a mapping of rule id -> rule")
    methods = {}
    for rule_id, raw in data.items():
        if not isinstance(raw, dict):
            raise InputError(f"{path}: rule {rule_id}: expected a mapping of fields")
        methods[f"yaml_{str(rule_id).replace('-', '_')}"] = compile_rule(str(rule_id), raw, path)
    return type(f"YamlRules_{path.stem}", (RuleSet,), {**methods, "yaml_source": str(path)})
