"""A diagnosis as a terminal report, a Markdown document, or JSON for other tools.

Causes come first because they carry a bounded gain; guards next, because a wrong input
invalidates every gain; then the checks to run and the lessons. Figures go through
``diagnoser.report.figures``, so every format prints a time or a size the same way.

A guided session's export passes its own verdict and the engineer's marks: the renderers only
print them (``diagnoser.session_verdict`` decides what they say).
"""

from __future__ import annotations

from collections.abc import Mapping

from diagnoser.models.hypothesis import Diagnosis, Hypothesis, Kind, Question
from diagnoser.report.figures import ms, num, quantity

SECTIONS = (
    (Kind.cause, "Causes, ranked by evidence grade, then bounded gain"),
    (Kind.guard, "Guards: mistakes in the inputs"),
    (Kind.check, "Checks to run"),
    (Kind.lesson, "Lessons"),
)
LEADING = "Guards that void the comparison: settle these before any cause"
# The report prints this many next questions; the JSON carries them all, ranked.
QUESTIONS_SHOWN = 3


def sections(d: Diagnosis) -> list[tuple[str, str, list[Hypothesis]]]:
    """(css class, heading, hypotheses) in report order; guards that void the comparison open it."""
    leading = [h for h in d.hypotheses if h.leads]
    out = [("guard", LEADING, leading)] if leading else []
    for kind, heading in SECTIONS:
        items = [h for h in d.of_kind(kind) if not h.leads]
        if items:
            out.append((kind.value, heading, items))
    return out


def question_text(q: Question) -> str:
    settles = []
    if q.would_bound:
        settles.append(f"bounds {', '.join(q.would_bound)}")
    if q.would_evaluate:
        settles.append(f"lets {', '.join(q.would_evaluate)} evaluate")
    return f"{q.label}: {q.how}" + (f" ({'; '.join(settles)})" if settles else "")


def evidence_text(h: Hypothesis) -> str:
    return ", ".join(f"{e.name}={quantity(e.value, e.unit)}" for e in h.evidence)


def gain_text(h: Hypothesis) -> str:
    if h.gain is None:
        if h.kind is not Kind.cause:
            return ""
        if h.claimed_ms is not None:
            return f"claims {ms(h.claimed_ms)} measured; no reference step to share it of yet" + (
                f" (needs {', '.join(h.bounded_by)})" if h.bounded_by else ""
            )
        return "not bounded yet" + (f": needs {', '.join(h.bounded_by)}" if h.bounded_by else "")
    g = h.gain
    capped = f", capped by {g.capped_by}" if g.capped_by else ""
    streamed = ""
    if g.stream_step_ms is not None:
        streamed = f"; ranked on the {ms(g.stream_step_ms)} a stream sees: {g.stream_speedup:.3f}x"
    if h.at_least:
        return (f"at least {ms(g.removable_ms)} of {ms(g.step_ms)} -> {ms(g.after_ms)} or less, {g.speedup:.3f}x or more "
                f"(a floor: it also costs inside the step it was measured against){capped}{streamed}")
    return f"at most {ms(g.removable_ms)} of {ms(g.step_ms)} -> {ms(g.after_ms)}, {g.speedup:.3f}x{capped}{streamed}"


def bound_line(d: Diagnosis) -> str | None:
    b = d.bound
    if b is None:
        return None
    basis = "bytes / bandwidth" if b.limited_by == "memory" else "FLOPs / peak throughput"
    parts = [f"floor {ms(b.floor_ms)} ({b.limited_by}-limited: {basis})"]
    if b.observed_step_ms is not None:
        parts.append(f"observed {ms(b.observed_step_ms)}")
    if b.unexplained_ms is not None:
        parts.append(f"unexplained {ms(b.unexplained_ms)}")
    if b.fraction_of_ceiling is not None:
        parts.append(f"{b.fraction_of_ceiling:.0%} of the ceiling")
    return "Bound: " + ", ".join(parts)


def verdict_line(d: Diagnosis) -> str:
    causes = d.of_kind(Kind.cause)
    guards = d.of_kind(Kind.guard)
    parts = []
    leading = [h for h in d.hypotheses if h.leads]
    if leading:
        parts.append(f"the comparison itself is in doubt ({leading[0].id})")
    if causes:
        top = causes[0]
        bound = f", at {'least' if top.at_least else 'most'} {top.gain.speedup:.3f}x" if top.gain else ", not bounded yet"
        parts.append(f"leading cause {top.id} ({top.grade.value if top.grade else 'ungraded'}{bound}; {len(causes)} cause(s))")
    else:
        parts.append("no cause named yet")
    if d.questions:
        parts.append(f"next: {d.questions[0].label}")
    if guards:
        parts.append(f"{len(guards)} input mistake(s) to fix first")
    return "Verdict: " + "; ".join(parts)


def summary_lines(d: Diagnosis, verdict: str | None = None) -> list[str]:
    """Reference step, bound and what it could not count, evidence left uncompared, verdict (the
    diagnosis's own unless one is given) and any changed threshold: the lines every format opens with."""
    lines = [f"Reference step: {ms(d.reference_step_ms)}"] if d.reference_step_ms is not None else []
    bound = bound_line(d)
    lines += ([bound] if bound else []) + [f"Bound note: {n}" for n in (d.bound.notes if d.bound else [])]
    lines += ([d.bound_note] if d.bound_note else []) + [f"Note: {n}" for n in d.notes] + [verdict or verdict_line(d)]
    if d.thresholds_changed:
        changed = ", ".join(f"{k} {num(was)} -> {num(now)}" for k, (was, now) in d.thresholds_changed.items())
        lines.append(f"Thresholds changed for this run: {changed}")
    return lines


def mark_suffix(h: Hypothesis, marks: Mapping[str, str] | None) -> str:
    """What the engineer concluded about ``h``, when a session marked it."""
    mark = (marks or {}).get(h.id)
    return f" - marked {mark} by the engineer" if mark else ""


def _hypothesis_lines(h: Hypothesis, index: int, indent: str, marks: Mapping[str, str] | None = None) -> list[str]:
    grade = f" ({h.grade.value})" if h.grade else ""
    lines = [f"{index}. [{h.id}] {h.title}{grade}{mark_suffix(h, marks)}"]
    gain = gain_text(h)
    if gain:
        lines.append(f"{indent}gain: {gain}")
    if h.parent:
        lines.append(f"{indent}refines: {h.parent}")
    lines.append(f"{indent}why: {h.explanation}")
    if h.evidence:
        lines.append(f"{indent}evidence: {evidence_text(h)}")
    if h.check:
        lines.append(f"{indent}check: {h.check.measure}")
        lines.append(f"{indent}  confirms: {h.check.confirms}")
        lines.append(f"{indent}  refutes: {h.check.refutes}")
    for r in h.remedies:
        predicted = f" -> {ms(r.predicted_step_ms)}, {r.predicted_speedup:.3f}x" if r.predicted_speedup else ""
        lines.append(f"{indent}remedy: {r.action} (cost: {r.cost}; risk: {r.risk}){predicted}")
    for u in h.undo:
        lines.append(f"{indent}undo if {u.metric.value}: {u.revert_if}")
    return lines


def render_text(d: Diagnosis, verdict: str | None = None, marks: Mapping[str, str] | None = None) -> str:
    out = [f"Diagnosis: {d.title}" if d.title else "Diagnosis", *summary_lines(d, verdict)]
    for _, heading, items in sections(d):
        out += ["", f"{heading}:"]
        for i, h in enumerate(items, 1):
            out += ["  " + line for line in _hypothesis_lines(h, i, "     ", marks)]
    if not d.of_kind(Kind.cause):
        out += ["", "No cause named yet."]
    if d.questions:
        out += ["", "Next questions (what would settle the most):"]
        out += [f"  {i}. {question_text(q)}" for i, q in enumerate(d.questions[:QUESTIONS_SHOWN], 1)]
    if d.rule_errors:
        out += ["", "Rule errors (the other rules still ran):"]
        out += [f"  {e.rule}: {e.error}" for e in d.rule_errors]
    out += ["", f"{d.rules_loaded} rules loaded."]
    return "\n".join(out)


def _markdown_item(line: str) -> str:
    """A report line as a list item, its indentation (two spaces a level) kept as nesting."""
    text = line.lstrip(" ")
    return "  " * ((len(line) - len(text)) // 2) + f"- {text}"


def render_markdown(d: Diagnosis, verdict: str | None = None, marks: Mapping[str, str] | None = None) -> str:
    out = [f"# Diagnosis{': ' + d.title if d.title else ''}", "", *(f"- {line}" for line in summary_lines(d, verdict))]
    for _, heading, items in sections(d):
        out += ["", f"## {heading}", ""]
        for i, h in enumerate(items, 1):
            first, *rest = _hypothesis_lines(h, i, "", marks)
            out.append(f"### {first}")
            out += [""] + [_markdown_item(line) for line in rest]
            out.append("")
    if not d.of_kind(Kind.cause):
        out += ["", "_No cause named yet._"]
    if d.questions:
        out += ["", "## Next questions", ""]
        out += [f"{i}. {question_text(q)}" for i, q in enumerate(d.questions[:QUESTIONS_SHOWN], 1)]
    if d.rule_errors:
        out += ["", "## Rule errors", ""] + [f"- `{e.rule}`: {e.error}" for e in d.rule_errors]
    return "\n".join(out).rstrip() + "\n"


def render_json(d: Diagnosis) -> str:
    return d.model_dump_json(indent=2)
