"""Walkthrough models as terminal text. Nothing here checks an answer or computes a score."""

from __future__ import annotations

import textwrap

from diagnoser.walkthroughs.prepare import Prepared
from diagnoser.walkthroughs.result import Outcome, StepView, Verdict, WalkthroughResult
from diagnoser.walkthroughs.sheet import InterviewerSheet

WIDTH = 100
UNIT_HINTS = {"x": "as a factor, e.g. 1.5x", "%": "in %, e.g. 40 %"}
ORDER_HINT = "answer with the letters in order, e.g. 'c a b'"


def paragraphs(text: str) -> list[str]:
    """A YAML block's paragraphs, each on one line: a terminal wraps them to its own width."""
    return [" ".join(paragraph.split()) for paragraph in text.strip().split("\n\n")]


def _wrap(text: str, indent: str = "") -> list[str]:
    out: list[str] = []
    for paragraph in paragraphs(text):
        out += ([""] if out else []) + textwrap.wrap(paragraph, WIDTH, initial_indent=indent, subsequent_indent=indent)
    return out


def _block(title: str, lines: list[str], indent: str = "  ") -> list[str]:
    if not lines:
        return []
    out = [f"{indent}{title}:"]
    for line in lines:
        out += textwrap.wrap(line, WIDTH, initial_indent=indent + "  ", subsequent_indent=indent + "    ") or [""]
    return out


def render_catalogue(catalogue: dict[str, Prepared]) -> str:
    rows = [f"{'name':<28} {'steps':>5}  title"]
    for name, prepared in sorted(catalogue.items()):
        rows.append(f"{name:<28} {len(prepared.doc.steps):>5}  {prepared.doc.title}")
    return "\n".join(rows + ["", "run one: diagnoser walkthrough NAME; the interviewer's sheet: diagnoser walkthrough --interviewer NAME"])


def render_intro(prepared: Prepared) -> str:
    doc = prepared.doc
    skills = ", ".join(doc.skills)
    return "\n".join([doc.title, "=" * min(len(doc.title), WIDTH), *_wrap(doc.scenario), "", f"skills scored: {skills}", ""])


def unit_hint(view: StepView) -> str | None:
    """How a number step wants its answer written; shared with the TUI so both ask alike."""
    return f"answer {UNIT_HINTS.get(view.unit, 'in ' + view.unit)}" if view.unit else None


def outcome_label(v: Verdict) -> str:
    """The outcome as one word, a trap with the mistake it names (shared with the TUI)."""
    return f"trap: {v.trap}" if v.outcome is Outcome.trap else v.outcome.value


def render_view(view: StepView) -> str:
    hint = unit_hint(view)
    lines = [f"{view.number}/{view.total} [{view.skill}]", *_wrap(view.ask + (f" ({hint})" if hint else ""), "  ")]
    lines += [f"    {o.letter}) {o.text}" for o in view.options]
    if view.kind == "order":
        lines.append(f"  ({ORDER_HINT})")
    return "\n".join(lines)


def render_verdict(v: Verdict) -> str:
    label = outcome_label(v)
    given = f" {v.read_as or v.answer}" if (v.read_as or v.answer) else ""
    head = f"  [{label}]{given}" + ("" if v.outcome is Outcome.correct else f"; expected {v.expected}")
    lines = [head]
    lines += _block("about this answer", v.why)
    lines += _block("why", [v.explanation])
    lines += _block("working", v.worked)
    lines += _block("the engine on these facts", v.engine)
    return "\n".join(lines)


def render_result(r: WalkthroughResult) -> str:
    lines = [f"score: {r.earned:g} / {r.possible:g} ({r.percent:.0f} %)" + ("" if r.complete else " - stopped before the end")]
    lines.append(f"  {'skill':<24} {'score':>9}  covers")
    lines += [f"  {s.skill:<24} {f'{s.earned:g}/{s.possible:g}':>9}  {s.covers}" for s in r.skills]
    traps = [v for v in r.steps if v.outcome is Outcome.trap]
    if traps:
        lines.append("traps fallen into: " + "; ".join(f"{v.step} ({v.trap})" for v in traps))
    if r.debrief:
        lines += ["", "what was found:", *_wrap(r.debrief, "  ")]
    if r.source:
        lines.append(f"  source: {r.source}")
    return "\n".join(lines)


def render_sheet(s: InterviewerSheet) -> str:
    lines = [f"Interviewer sheet: {s.title} ({s.walkthrough})", "", "scenario (read it out):", *_wrap(s.scenario, "  "), ""]
    for index, step in enumerate(s.steps, 1):
        lines += [f"{index}. [{step.skill}] {step.id}", *_wrap(step.ask, "   ")]
        lines += [f"     {o}" for o in step.options]
        lines.append(f"   expected: {step.expected}")
        lines += _block("reasoning", step.reasoning, "   ")
        for wrong in step.wrong_answers:
            lines += _block(f"wrong: {wrong.answer}", wrong.why, "   ")
        lines += _block("ask next", step.follow_ups, "   ")
        lines.append("")
    if s.debrief:
        lines += ["what was found:", *_wrap(s.debrief, "  ")]
    if s.source:
        lines.append(f"  source: {s.source}")
    return "\n".join(lines)
