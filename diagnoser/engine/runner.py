"""Run the composed rule base over one case and rank what it concludes.

Three things here are policy, not plumbing: a rule that raises is recorded and the rest
still run; every gain is bounded by Amdahl over the measured step and by the parent's gain;
and the output order depends only on the conclusions (experta's agenda order varies with
PYTHONHASHSEED), so two runs of one case print the same report.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from diagnoser.engine.canonical import canonical
from diagnoser.engine.comparison import setting_value
from diagnoser.engine.facts import (
    Holds,
    Unevaluable,
    case_facts,
    model_features,
    present_inputs,
    reference_step_ms,
    with_derived_budget,
)
from diagnoser.engine.expectation import uncompared_expected
from diagnoser.engine.questions import next_questions
from diagnoser.engine.loader import Rulebook
from diagnoser.engine.limits import RULE_TIME_LIMIT_S, RuleTimeout, rules_print_to_stderr, time_limit
from diagnoser.engine.spec import PARENT_CAP, PARENT_STEP, Finding, RuleSpec, ev, test_errors
from diagnoser.experta_compat import KnowledgeEngine
from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.serving import WHOLESALE_SETTINGS
from diagnoser.models.workload import Boundary, Observed
from diagnoser.models.hypothesis import (
    GRADE_ORDER,
    KIND_ORDER,
    Grade,
    BoundSummary,
    Diagnosis,
    Evidence,
    Hypothesis,
    Kind,
    Remedy,
    RuleError,
)
from diagnoser.whatif import bounded_gain


# What a measurement guard can void: a figure the observation is held against (an expected or quoted one, the
# bound's floor) or other runs of it. A flag that the rate counts prefill, with none of these, voids nothing: the
# figure is still the symptom, and the causes that explain it come first.
COMPARISONS = frozenset({"expected", "bound", "bound_inputs", "runs", "context_sweep"})


class DiagnosisEngine(KnowledgeEngine):
    """Base of the composed engine: collects hypotheses and rule errors as rules fire."""

    specs: dict[str, RuleSpec] = {}

    def start(
        self,
        reference_step_ms: float | None,
        unevaluable: set[str] = frozenset(),
        present: set[str] = frozenset(),
        floor_ms: float | None = None,
    ) -> None:
        """Forget the previous case: facts, agenda and conclusions."""
        self.reset()
        self.reference_step_ms = reference_step_ms
        self.floor_ms = floor_ms
        self.unevaluable = set(unevaluable)
        self.present = set(present)
        self.compared = bool(self.present & COMPARISONS)
        self.found: list[Hypothesis] = []
        self.errors: list[RuleError] = []
        self.fired: set[str] = set()  # rules whose patterns matched, whatever their body made of it

    def fire(self, spec: RuleSpec, body: Callable[..., Finding | None], bindings: dict[str, Any]) -> None:
        self.fired.add(spec.id)
        # A refinement matched through Unevaluable (its parent's inputs are absent) has no parent cap.
        standalone = spec.parent is not None and PARENT_CAP not in bindings
        cap = bindings.get(PARENT_CAP)
        step = bindings.get(PARENT_STEP) or self.reference_step_ms
        wanted = list(inspect.signature(body).parameters)[1:]
        try:
            with time_limit(RULE_TIME_LIMIT_S, "the rule body"):
                finding = body(self, **{name: bindings.get(name) for name in wanted})
            if finding is None:
                return
            hypothesis = build_hypothesis(spec, finding, step, cap, self.bounded_by(spec, finding), self.floor_ms, self.compared)
        except (Exception, RuleTimeout, SystemExit) as err:  # noqa: BLE001 - one broken rule must not sink the diagnosis
            self.errors.append(RuleError(rule=spec.id, error=f"{type(err).__name__}: {err}"))
            return
        self.found.append(hypothesis)
        if hypothesis.kind is Kind.cause:
            if standalone:
                self.found += self.implied_parents(spec, hypothesis)
            gain = hypothesis.gain
            self.declare(Holds(rule=spec.id, cap_ms=gain.removable_ms if gain else None, step_ms=gain.step_ms if gain else None))

    def bounded_by(self, spec: RuleSpec, finding: Finding | None = None) -> list[str]:
        """The absent inputs that would bound a cause: a step to take a share of when its time is
        measured, else the spec's list, else what it and its ancestors require."""
        if finding is not None and finding.removable_ms is not None:
            wanted = {"budget", "metrics"}
        elif spec.bounded_by:
            wanted = set(spec.bounded_by)
        else:
            chain = [spec]
            while chain[-1].parent is not None and chain[-1].parent in self.specs:
                chain.append(self.specs[chain[-1].parent])
            wanted = {name for s in chain for name in s.requires} or {"budget"}
        # When every input it names is in hand and still bounds nothing, an A/B run isolates it.
        return sorted(wanted - self.present) or sorted({"runs"} - self.present)

    def implied_parents(self, spec: RuleSpec, child: Hypothesis) -> list[Hypothesis]:
        """Ancestors a standalone refinement implies, at its grade or below (never measured: they
        claim no time of their own), up to the first one that can be evaluated."""
        grade = child.grade if child.grade is not Grade.measured else Grade.indicated
        implied = []
        parent_id = spec.parent
        while parent_id is not None and parent_id in self.unevaluable:
            parent = self.specs[parent_id]
            finding = Finding(evidence=[ev("implied_by", child.id)], grade=grade, detail=f"Implied by {child.id}; its own inputs are absent.")
            named = build_hypothesis(parent, finding, None, None, self.bounded_by(parent))
            implied.append(named.model_copy(update={"implied_by": child.id}))
            parent_id = parent.parent
        return implied


def grade_of(spec: RuleSpec, finding: Finding) -> Grade:
    """Measured exactly when the finding claims a time: only a measured figure may bound a gain,
    so a rule with an estimate gives it as detail and claims nothing. Otherwise the grade its
    evidence supports (the finding's, else the spec's), never measured."""
    if finding.removable_ms is not None:
        return Grade.measured
    declared = finding.grade or spec.grade
    return Grade.indicated if declared is Grade.measured else declared


def floor_cap(step_ms: float, floor_ms: float | None, cap_ms: float | None, cap_name: str | None) -> tuple[float | None, str | None]:
    """The parent's cap, or the room above the physical floor when that is smaller: no fix takes a
    step below the time its bytes need. A step at or under the floor voids the floor instead (a
    guard says so), so it caps nothing."""
    if floor_ms is None or step_ms <= floor_ms:
        return cap_ms, cap_name
    room = step_ms - floor_ms
    return (room, "the bound's floor") if cap_ms is None or room < cap_ms else (cap_ms, cap_name)


def build_hypothesis(
    spec: RuleSpec,
    finding: Finding,
    reference_ms: float | None,
    cap_ms: float | None,
    bounded_by: list[str] = (),
    floor_ms: float | None = None,
    compared: bool = True,
) -> Hypothesis:
    on_top = finding.on_top and reference_ms is not None and finding.removable_ms is not None
    step = reference_ms + finding.removable_ms if on_top else finding.step_ms or reference_ms
    gain = None
    remedies = []
    if finding.removable_ms is not None and step:
        # The floor is one step's bytes: it caps claims on the reference step, not on another
        # boundary's or another context's interval (a finding's own step_ms or a time on top of the step).
        floor = floor_ms if finding.step_ms is None and not on_top else None
        cap, cap_name = floor_cap(step, floor, cap_ms, spec.parent)
        gain = bounded_gain(step, finding.removable_ms, cap, cap_name)
        if on_top:
            gain = gain.model_copy(update={"over_ms": reference_ms})
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
    grade = grade_of(spec, finding) if kind is Kind.cause else None
    return Hypothesis(
        grade=grade,
        claimed_ms=finding.removable_ms if kind is Kind.cause else None,
        at_least=finding.at_least and kind is Kind.cause and gain is not None,
        bounded_by=list(bounded_by) if kind is Kind.cause and gain is None else [],
        leads=spec.leads and (compared or spec.compares_itself),
        locates=spec.locates,
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
        refines=list(spec.refines),
        follows_from=list(spec.follows_from) if finding.consequence else [],
        missing=finding.missing,
    )


def stream_steps(hypotheses: list[Hypothesis]) -> dict[float, float]:
    """For each reference step that some time comes on top of, the longest such sum: the time per token
    a stream sees, which every cause measured on that reference step also comes out of."""
    found: dict[float, float] = {}
    for h in hypotheses:
        if h.gain is not None and h.gain.over_ms is not None:
            found[h.gain.over_ms] = max(found.get(h.gain.over_ms, 0.0), h.gain.step_ms)
    return found


def compared_speedup(h: Hypothesis, streams: dict[float, float]) -> float:
    """The speed-up a cause's time gives on the step a stream sees, so causes on the reference step and
    times on top of it are compared on one step; elsewhere, its own."""
    if h.gain is None:
        return 1.0
    seen = streams.get(h.gain.over_ms if h.gain.over_ms is not None else h.gain.step_ms)
    return h.gain.speedup if seen is None else seen / (seen - h.gain.removable_ms)


# Speed-ups are compared to two decimals: measured figures repeat within a few per cent, so causes a
# thousandth apart (a timed host cost and the A/B delta it is spent in) are equal, and the evidence decides.
SPEEDUP_DIGITS = 2


def _rank_key(h: Hypothesis, streams: dict[float, float], common: frozenset[str] = frozenset(),
              behind_located: frozenset[str] = frozenset()) -> tuple:
    """A locating cause (the slowdown follows a changed setting) restates the comparison the
    engineer supplied; a mechanism of any grade says what to fix inside it, so it comes first.
    A cause named only by a setting every compared run shares (``common``) cannot explain their
    difference, so for the comparison's question it comes after the located change."""
    speedup = compared_speedup(h, streams)
    standing = 2 if h.id in common else int(h.locates or h.rule in behind_located)
    grade = GRADE_ORDER[h.grade] if h.grade is not None else 0
    # At equal gain a measured cause comes before its refinements (they are capped by it, never
    # above it); an unbounded one after them, since it is only named because they hold.
    refinement_first = h.gain is None and h.grade is not Grade.measured
    family = (h.parent is None) if refinement_first else (h.parent is not None)
    return (
        not h.leads, KIND_ORDER[h.kind], standing, grade, -round(speedup, SPEEDUP_DIGITS), h.implied_by is not None,
        named_by_the_bound_alone(h), family, -len(h.evidence), h.id, h.model_dump_json(),
    )


def named_by_the_bound_alone(h: Hypothesis) -> bool:
    """A possible cause whose only evidence is the pinned model's shape against its floor (few rows per expert, a step
    far above the floor) holds for every deployment of that model at that batch; one that something stated about this
    deployment names (its format, its backend, a setting) says more about this one, so at the same grade and gain it
    comes first."""
    return h.grade is Grade.possible and bool(h.evidence) and all(e.name.startswith("bound.") for e in h.evidence)


# A measured refinement that accounts for at least half of its measured parent's time says where
# that time goes: it takes the parent's place, just ahead of it, rather than following it. A cause
# that ``refines`` other broader causes (locating their time without depending on them) does the
# same for the best placed of those it explains.
EXPLAINS_PARENT = 0.5
# How many leading fields of a rank key say where a hypothesis stands (lead, kind, locates, grade,
# speed-up); a refinement that explains its parent takes these from the parent.
STANDING = 5


def explains_parent(h: Hypothesis, parent: Hypothesis | None) -> bool:
    if parent is None or h.gain is None or parent.gain is None:
        return False
    if h.grade is not Grade.measured or parent.grade is not Grade.measured:
        return False
    return h.gain.removable_ms >= EXPLAINS_PARENT * parent.gain.removable_ms


def names_parents_mechanism(h: Hypothesis, parent: Hypothesis | None) -> bool:
    """A refinement its own evidence indicates (a setting, a counter) but whose time nothing isolates, under a
    parent whose time is measured: the parent is the bucket the time was found in, the refinement the one named
    mechanism that may fill it, so it is what to check first. Its share stays unknown (no gain is claimed for
    it); a measured refinement under half of its parent is the one case that keeps its place behind, since its
    share is known to be the smaller part, unless its time is only a floor (measured against a figure that pays the
    mechanism too): then its share is not known either."""
    if parent is None or parent.gain is None or parent.grade is not Grade.measured:
        return False
    return (h.gain is None and h.grade is Grade.indicated) or (h.at_least and h.grade is Grade.measured)


def leads_parent(h: Hypothesis, parent: Hypothesis | None) -> bool:
    return explains_parent(h, parent) or names_parents_mechanism(h, parent)


def sweep_constants(case: Case) -> dict[str, str]:
    """The settings two or more runs all state with one value, when every other setting they state is one
    that the runs vary: whatever a constant costs, every side of that one change pays it alike. Runs that
    vary two settings (a version with and without LoRA) can show a change whose cost depends on another
    setting, and a constant can be the multiplier of such an interaction (eager launches times a kernel
    count that a version changed), so nothing is held constant for them."""
    runs = case.observations.runs if case.observations is not None else []
    if len(runs) < 2:
        return {}
    names = set().union(*(r.settings for r in runs))
    values = {n: {setting_value(r, n) for r in runs} for n in names}
    if sum(len(v) > 1 for v in values.values()) != 1:
        return {}
    return {n: v.pop() for n, v in values.items() if len(v) == 1 and "unset" not in v}


def common_to_runs(hypotheses: list[Hypothesis], shared: dict[str, str]) -> frozenset[str]:
    """Causes named only by settings every run shares (or implied only by such a cause), when a measured
    cause locates the runs' difference: a setting on both sides of an A/B cannot be what differs between them."""
    if not any(h.locates and h.grade is Grade.measured for h in hypotheses):
        return frozenset()

    def stated_alike(e: Evidence) -> bool:
        name = e.name.rsplit(".", 1)[-1]
        return name in shared and str(e.value).lower() == shared[name]

    common = {
        h.id for h in hypotheses
        if h.kind is Kind.cause and not h.locates and h.gain is None and h.evidence and all(map(stated_alike, h.evidence))
    }
    common |= {h.id for h in hypotheses if h.implied_by in common}
    return frozenset(common)


# Evidence a case states once for all its runs (settings, the expected figure's kind, the pin) or the bound derives
# from them, as against what a run, a probe, a trace or a counter measured.
STATED_ONCE = ("bound.", "server.", "expected.", "workload.")


def merely_possible(hypotheses: list[Hypothesis]) -> frozenset[str]:
    """Rules whose every cause is only possible, when a cause locates the runs' difference in one setting that changes a
    single thing (measured, or possible where the delta is within what benchmarks repeat within): a candidate named by
    what the case states (a weight format, an engine's class) is stated alike on both sides of such an A/B, so it
    cannot be what separates them, however small the separation, and it ranks with the located change, after it. A
    change of engine, release, build, machine or OS replaces every path at once: any mechanism may lie inside it, and
    one that something measured or observed points at keeps its place before it. One named only by what the case
    states once for every run (a weight format, a setting, the pinned model's floor under a long step) is on both
    sides of that A/B alike, so it says nothing of what the change did, and goes behind it."""
    located = [h for h in hypotheses if h.locates and h.grade in (Grade.measured, Grade.possible)]
    if not located:
        return frozenset()
    causes = [h for h in hypotheses if h.kind is Kind.cause and not h.locates]
    behind = causes
    if any(h.id.partition(":")[2] in WHOLESALE_SETTINGS for h in located):
        behind = [h for h in causes if h.evidence and all(e.name.startswith(STATED_ONCE) for e in h.evidence)]
    return frozenset({h.rule for h in behind if h.grade is Grade.possible} - {h.rule for h in causes if h.grade is not Grade.possible})


def rank(hypotheses: list[Hypothesis], shared: dict[str, str] | None = None) -> list[Hypothesis]:
    """Best first: guards that void the comparison; then causes by grade, bounded speed-up, parents
    before refinements (unless a measured refinement explains its parent), a consequence behind the
    upstream cause it follows from, evidence; then the
    other kinds. One entry per id. ``shared``: the settings a one-setting sweep of runs holds constant."""
    streams = stream_steps(hypotheses)
    common = common_to_runs(hypotheses, shared or {})
    behind = merely_possible(hypotheses)
    keys = {id(h): _rank_key(h, streams, common, behind) for h in hypotheses}
    best: dict[str, Hypothesis] = {}
    for h in sorted(hypotheses, key=lambda h: keys[id(h)]):
        best.setdefault(h.rule, h)

    def key(h: Hypothesis) -> tuple:
        own = keys[id(h)]
        broader = [best.get(r) for r in (h.parent, *h.refines) if r]
        explained = [keys[id(b)] for b in broader if leads_parent(h, b)]
        placed = (*min(explained)[:STANDING], -1, *own[STANDING:]) if explained else own
        upstream = [best.get(r) for r in h.follows_from]
        behind = [(*keys[id(u)][:STANDING], 2, *own[STANDING:]) for u in upstream if u is not None and u.kind is Kind.cause]
        return max((placed, *behind))

    seen: set[str] = set()
    ranked = []
    for h in sorted(hypotheses, key=key):
        if h.id not in seen:
            seen.add(h.id)
            ranked.append(_on_the_stream_step(_said_common(h) if h.id in common else h, streams))
    return ranked


def _said_common(h: Hypothesis) -> Hypothesis:
    """Why a cause its evidence names stands behind the located change."""
    note = "The setting that names it is alike in every compared run, so it cannot explain their difference; it ranks after the located change."
    return h.model_copy(update={"explanation": f"{h.explanation} {note}"})


def _on_the_stream_step(h: Hypothesis, streams: dict[float, float]) -> Hypothesis:
    """A gain on a reference step that time on top of it lengthens says on which step it was ranked."""
    if h.gain is None or h.gain.over_ms is not None or h.gain.step_ms not in streams:
        return h
    seen = streams[h.gain.step_ms]
    ranked_on = {"stream_step_ms": seen, "stream_speedup": compared_speedup(h, streams)}
    return h.model_copy(update={"gain": h.gain.model_copy(update=ranked_on)})


def _summary(source: str, floor_ms: float, result, **extra: float | str) -> BoundSummary:
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


def incomplete_pin(case: Case) -> str | None:
    """Why the pinned workload cannot give a bound (model or GPU not known), or None."""
    from diagnoser.models.hardware import hardware_preset
    from diagnoser.models.model_spec import resolve_model

    w = case.workload
    if w is None:
        return None
    if w.model is None:
        return "no bound: the model is not pinned (name a preset or give its dimensions)"
    if model_features(case) is None:
        if isinstance(w.model, dict):
            try:
                resolve_model(w.model)
            except InputError as err:
                return f"no bound: {err}"
        return (f"no bound: model {w.model!r} is neither a preset nor a readable config.json (give a config.json path, "
                "or its dimensions inline)")
    if w.hardware is None:
        return "no bound: the GPU is not pinned (name it as nvidia-smi prints it)"
    try:
        hardware_preset(w.hardware)
    except InputError:
        if w.measured_bandwidth_gbs:
            return None
        return (f"no bound: GPU {w.hardware!r} matches no preset (unknown); give its measured bandwidth "
                "(workload.measured_bandwidth_gbs) or the bytes and bandwidth with bound_inputs")
    return None


def _observed_for_bound(case: Case, step: float) -> Observed:
    metrics = case.observations.metrics
    boundary = metrics.boundary.value if metrics is not None and case.observations.budget is None else "device_step"
    return Observed(step_ms=step, boundary=boundary if boundary in Boundary.__members__ else "device_step")


def compute_bound_summary(case: Case) -> BoundSummary | None:
    """The lead's bound for this case: the pinned workload if any, else the quoted bytes/bandwidth."""
    from diagnoser.bound import compute_bound, floor_from_bytes

    step = reference_step_ms(case)
    if case.workload is not None and incomplete_pin(case) is None:
        workload = case.workload
        if workload.observed is None and step is not None:
            # a copy, not a re-validation: the fields the case left out stay unstated (a context is not 0)
            workload = workload.model_copy(update={"observed": _observed_for_bound(case, step)})
        report = compute_bound(workload)
        critical = next(r for r in report.per_rank if r.rank == report.critical_rank)
        return _summary(
            "compute_bound",
            report.step_floor_ms,
            report,
            limited_by="compute" if report.compute_floor_ms > report.floor_ms else "memory",
            critical_rank_bytes=critical.bytes_total,
            active_parameter_bytes=report.naive.bytes_total,
            bandwidth_gbs=report.bandwidth_gbs,
            expert_bytes=report.expert_union.expert_bytes_busiest_rank if report.expert_union else None,
            rows_per_touched_expert=report.expert_union.rows_per_touched_expert if report.expert_union else None,
            resident_share=report.memory.needed_bytes / capacity if (capacity := report.memory.capacity_bytes) else None,
            weights_share=report.memory.weights_bytes / capacity if capacity else None,
            lacks=report.lacks,
            notes=report.notes,
        )
    quoted = case.bound_inputs
    if quoted is not None and quoted.bytes_per_step and quoted.bandwidth_gbs:
        result = floor_from_bytes(quoted.bytes_per_step, quoted.bandwidth_gbs, observed_step_ms=step, boundary=quoted.boundary)
        return _summary("floor_from_bytes", result.floor_ms, result)
    return None


def prepared(case: Case) -> Case:
    """The case as the rules and the report read it: a budget derived from its shares, every canonical fact filled."""
    return canonical(with_derived_budget(case))


def run_engine(case: Case, rulebook: Rulebook) -> tuple[DiagnosisEngine, BoundSummary | None, float | None]:
    """The engine after it has run over the case: its facts, conclusions and rule errors."""
    return _run_prepared(prepared(case), rulebook)


def _run_prepared(case: Case, rulebook: Rulebook) -> tuple[DiagnosisEngine, BoundSummary | None, float | None]:
    bound = compute_bound_summary(case)
    step = reference_step_ms(case) or (bound.observed_step_ms if bound else None)
    present = present_inputs(case, bound)
    unevaluable = unevaluable_rules(rulebook, present)
    engine = rulebook.engine(step, unevaluable, present, bound.floor_ms if bound else None)
    raised: list[RuleError] = []
    token = test_errors.set(raised)
    try:
        with rules_print_to_stderr():
            engine.declare(*case_facts(case, bound), *(Unevaluable(rule=r) for r in sorted(unevaluable)))
            engine.run()
    finally:
        test_errors.reset(token)
    engine.errors.extend(raised)
    return engine, bound, step


def unevaluable_rules(rulebook: Rulebook, present: set[str]) -> set[str]:
    """Cause rules missing a required input: refinements of these may fire on their own evidence."""
    return {
        spec.id
        for spec in rulebook.specs.values()
        if spec.kind is Kind.cause and any(name not in present for name in spec.requires)
    }


def diagnose(case: Case, rulebook: Rulebook) -> Diagnosis:
    case = prepared(case)
    engine, bound, step = _run_prepared(case, rulebook)
    hypotheses = rank(engine.found, sweep_constants(case))
    present = engine.present
    errors = sorted(engine.errors, key=lambda e: (e.rule, e.error))
    return Diagnosis(
        title=case.title,
        reference_step_ms=step,
        bound=bound,
        bound_note=incomplete_pin(case),
        hypotheses=hypotheses,
        notes=uncompared_expected(case),
        questions=next_questions(rulebook, present, hypotheses, bound, model_features(case)),
        rule_errors=list({(e.rule, e.error): e for e in errors}.values()),
        rules_loaded=len(rulebook.specs),
    )
