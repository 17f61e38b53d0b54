"""Run the composed rule base over one case and rank what it concludes.

Three things here are policy, not plumbing: a rule that raises is recorded and the rest
still run; every gain is bounded by Amdahl over the measured step and by the parent's gain;
and the output order depends only on the conclusions (experta's agenda order varies with
PYTHONHASHSEED), so two runs of one case print the same report.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from typing import Any, Callable

from diagnoser.engine.facts import (
    INPUTS,
    Holds,
    case_facts,
    present_inputs,
    reference_step_ms,
)
from diagnoser.engine.loader import Rulebook
from diagnoser.engine.spec import PARENT_CAP, PARENT_STEP, Finding, RuleSpec, ev, test_errors
from diagnoser.experta_compat import KnowledgeEngine
from diagnoser.models.case import Case
from diagnoser.models.hypothesis import (
    KIND_ORDER,
    BoundSummary,
    Check,
    Diagnosis,
    Hypothesis,
    Kind,
    Remedy,
    RuleError,
)
from diagnoser.whatif import bounded_gain


class DiagnosisEngine(KnowledgeEngine):
    """Base of the composed engine: collects hypotheses and rule errors as rules fire."""

    def start(self, reference_step_ms: float | None) -> None:
        """Forget the previous case: facts, agenda and conclusions."""
        self.reset()
        self.reference_step_ms = reference_step_ms
        self.found: list[Hypothesis] = []
        self.errors: list[RuleError] = []
        self.fired: set[str] = set()  # rules whose patterns matched, whatever their body made of it

    def fire(self, spec: RuleSpec, body: Callable[..., Finding | None], bindings: dict[str, Any]) -> None:
        self.fired.add(spec.id)
        cap = bindings.get(PARENT_CAP)
        step = bindings.get(PARENT_STEP) or self.reference_step_ms
        wanted = list(inspect.signature(body).parameters)[1:]
        try:
            finding = body(self, **{name: bindings[name] for name in wanted})
            if finding is None:
                return
            hypothesis = build_hypothesis(spec, finding, step, cap)
        except Exception as err:  # noqa: BLE001 - one broken rule must not sink the diagnosis
            self.errors.append(RuleError(rule=spec.id, error=f"{type(err).__name__}: {err}"))
            return
        self.found.append(hypothesis)
        if hypothesis.kind is Kind.cause:
            gain = hypothesis.gain
            self.declare(Holds(rule=spec.id, cap_ms=gain.removable_ms if gain else None, step_ms=gain.step_ms if gain else None))


def build_hypothesis(spec: RuleSpec, finding: Finding, reference_ms: float | None, cap_ms: float | None) -> Hypothesis:
    step = finding.step_ms or reference_ms
    gain = None
    remedies = []
    if finding.removable_ms is not None and step:
        gain = bounded_gain(step, finding.removable_ms, cap_ms, spec.parent)
    for r in spec.remedies:
        predicted = bounded_gain(step, gain.removable_ms * r.share) if gain else None
        remedies.append(
            Remedy(
                action=r.action,
                cost=r.cost,
                risk=r.risk,
                share=r.share,
                predicted_step_ms=predicted.after_ms if predicted else None,
                predicted_speedup=predicted.speedup if predicted else None,
            )
        )
    # A cause with nothing to show for it is a check to run, not a conclusion.
    kind = Kind.check if spec.kind is Kind.cause and not finding.evidence else spec.kind
    return Hypothesis(
        id=f"{spec.id}:{finding.key}" if finding.key else spec.id,
        rule=spec.id,
        kind=kind,
        title=spec.title,
        explanation=f"{spec.explanation} {finding.detail}".strip(),
        evidence=finding.evidence,
        check=spec.check,
        gain=gain,
        remedies=remedies,
        undo=list(spec.undo),
        parent=spec.parent,
        missing=finding.missing,
    )


def _rank_key(h: Hypothesis) -> tuple:
    speedup = h.gain.speedup if h.gain else 1.0
    # At equal gain a cause comes before its refinements (they are capped by it, never above it).
    return (KIND_ORDER[h.kind], -round(speedup, 9), h.parent is not None, -len(h.evidence), h.id, h.model_dump_json())


def rank(hypotheses: list[Hypothesis]) -> list[Hypothesis]:
    """Best first: causes by bounded speed-up, parents before refinements, then evidence; one entry per id."""
    seen: set[str] = set()
    ranked = []
    for h in sorted(hypotheses, key=_rank_key):
        if h.id not in seen:
            seen.add(h.id)
            ranked.append(h)
    return ranked


def missing_input_checks(rulebook: Rulebook, present: set[str], held: set[str]) -> list[Hypothesis]:
    """One "check to run" per absent input, naming the causes it would let us evaluate.

    An input that would refine a cause already concluded says so in its evidence, which ranks
    it before inputs that only open new questions: it splits time the diagnosis already holds.
    """
    blocked: dict[str, list[str]] = defaultdict(list)
    for spec in rulebook.specs.values():
        if spec.kind is not Kind.cause or not spec.report_missing:
            continue
        if spec.parent is not None and spec.parent not in held:
            continue
        for name in spec.requires:
            if name not in present:
                blocked[name].append(spec.id)
    checks = []
    for name in sorted(blocked):
        info = INPUTS[name]
        rules = sorted(set(blocked[name]))
        refined = sorted({p for r in rules if (p := rulebook.specs[r].parent) is not None})
        why = f"{len(rules)} cause rule(s) cannot evaluate without it: {', '.join(rules)}."
        if refined:
            why += f" They refine {', '.join(refined)}, which holds."
        checks.append(
            Hypothesis(
                id=f"missing:{name}",
                rule="engine",
                kind=Kind.check,
                title=f"Check to run: no {info.label} in the case",
                explanation=why,
                evidence=[ev("refines", parent) for parent in refined],
                check=Check(
                    measure=info.how,
                    confirms="any of those rules firing with evidence",
                    refutes="the rules staying silent once the input is present",
                ),
                missing=[name],
            )
        )
    return checks


def _summary(source: str, floor_ms: float, result, **extra: float) -> BoundSummary:
    return BoundSummary(
        **extra,
        source=source,
        floor_ms=floor_ms,
        observed_step_ms=result.observed_step_ms,
        unexplained_ms=result.unexplained_ms,
        fraction_of_ceiling=result.fraction_of_ceiling,
        ceiling_tokens_per_s=result.ceiling_tokens_per_s,
        sanity=result.sanity,
    )


def compute_bound_summary(case: Case) -> BoundSummary | None:
    """The lead's bound for this case: the pinned workload if any, else the quoted bytes/bandwidth."""
    from diagnoser.bound import compute_bound, floor_from_bytes

    step = reference_step_ms(case)
    if case.workload is not None:
        workload = case.workload
        if workload.observed is None and step is not None:
            workload = type(workload).model_validate({**workload.model_dump(), "observed": {"step_ms": step}})
        report = compute_bound(workload)
        critical = next(r for r in report.per_rank if r.rank == report.critical_rank)
        return _summary(
            "compute_bound",
            report.step_floor_ms,
            report,
            critical_rank_bytes=critical.bytes_total,
            active_parameter_bytes=report.naive.bytes_total,
            bandwidth_gbs=report.bandwidth_gbs,
            expert_bytes=report.expert_union.expert_bytes_busiest_rank if report.expert_union else None,
            rows_per_touched_expert=report.expert_union.rows_per_touched_expert if report.expert_union else None,
        )
    quoted = case.bound_inputs
    if quoted is not None and quoted.bytes_per_step and quoted.bandwidth_gbs:
        result = floor_from_bytes(quoted.bytes_per_step, quoted.bandwidth_gbs, observed_step_ms=step, boundary=quoted.boundary)
        return _summary("floor_from_bytes", result.floor_ms, result)
    return None


def run_engine(case: Case, rulebook: Rulebook) -> tuple[DiagnosisEngine, BoundSummary | None, float | None]:
    """The engine after it has run over the case: its facts, conclusions and rule errors."""
    bound = compute_bound_summary(case)
    step = reference_step_ms(case) or (bound.observed_step_ms if bound else None)
    engine = rulebook.engine(step)
    raised: list[RuleError] = []
    token = test_errors.set(raised)
    try:
        engine.declare(*case_facts(case, bound))
        engine.run()
    finally:
        test_errors.reset(token)
    engine.errors.extend(raised)
    return engine, bound, step


def diagnose(case: Case, rulebook: Rulebook) -> Diagnosis:
    engine, bound, step = run_engine(case, rulebook)
    held = {h.rule for h in engine.found if h.kind is Kind.cause}
    checks = missing_input_checks(rulebook, present_inputs(case, bound), held)
    errors = sorted(engine.errors, key=lambda e: (e.rule, e.error))
    return Diagnosis(
        title=case.title,
        reference_step_ms=step,
        bound=bound,
        hypotheses=rank(engine.found + checks),
        rule_errors=list({(e.rule, e.error): e for e in errors}.values()),
        rules_loaded=len(rulebook.specs),
    )
