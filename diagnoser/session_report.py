"""A guided session as a report: the decision and the engineer's marks, then the diagnosis.

The diagnosis itself goes through the ordinary renderers (``diagnoser.report``), so an exported
session reads exactly like ``diagnose --markdown`` / ``--html`` / ``--json`` below its opening
section. That section says what was chosen, what the diagnosis predicted for it, and what to
watch after the change: the undo criteria are the reason the decision is written down. The
verdict and the hypotheses below carry the engineer's marks (``diagnoser.session_verdict``): a
report that lists a refutation never names the refuted cause as the leading one.
"""

from __future__ import annotations

from html import escape

from diagnoser.chart_inputs import chart_inputs
from diagnoser.models.hypothesis import Diagnosis
from diagnoser.models.session import Decision, Session, SessionReport
from diagnoser.report import render_html, render_markdown
from diagnoser.report.figures import field_value, ms
from diagnoser.session_verdict import mark_labels, session_verdict


def prediction_text(decision: Decision) -> str:
    """The remedy's predicted step and speed-up, and the hypothesis's bound it sits under."""
    r = decision.remedy
    parts = []
    if r.predicted_step_ms is not None and r.predicted_speedup is not None:
        parts.append(f"step {ms(r.predicted_step_ms)}, {r.predicted_speedup:.3f}x")
    if decision.gain is not None:
        g = decision.gain
        parts.append(f"the cause removes at most {ms(g.removable_ms)} of {ms(g.step_ms)} ({g.speedup:.3f}x)")
    return "; ".join(parts) if parts else "not bounded yet: measure the cause's time before promising a gain"


def _decision_lines(session: Session) -> list[str]:
    d = session.decision
    if d is None:
        return ["# Decision: none taken yet", ""]
    lines = [
        f"# Decision: {d.remedy.action}",
        "",
        f"- addresses: [{d.hypothesis}] {d.title}",
        f"- predicted gain: {prediction_text(d)}",
        f"- cost: {d.remedy.cost}; risk: {d.remedy.risk}",
    ]
    if d.note:
        lines.append(f"- note: {d.note}")
    lines += ["", "## Undo criteria: watch these after the change", ""]
    lines += [f"- {u.metric.value}: revert if {u.revert_if}" for u in d.undo] or ["- none given"]
    return lines + [""]


def _session_lines(session: Session) -> list[str]:
    lines: list[str] = []
    marked = {hid: m for hid, m in session.marks.items() if m.status or m.note}
    if marked:
        lines += ["## Marks", ""]
        for hid, m in marked.items():
            status = m.status.value if m.status else "open"
            lines.append(f"- [{hid}] {status}" + (f": {m.note}" if m.note else ""))
        lines.append("")
    if session.answers:
        lines += ["## Answers", ""] + [f"- {a.input}: {field_value(a.input, a.value)}" for a in session.answers] + [""]
    if session.sources:
        lines += ["## Evidence, and where it came from", ""]
        lines += [f"- {s.kind.value}: {s.label}" + (f" ({', '.join(s.sections)})" if s.sections else "") for s in session.sources]
        lines.append("")
    return lines


def render_session_markdown(session: Session, diagnosis: Diagnosis) -> str:
    report = render_markdown(diagnosis, session_verdict(session, diagnosis), mark_labels(session))
    return "\n".join(_decision_lines(session) + _session_lines(session)) + "\n" + report


def _decision_html(session: Session) -> str:
    d = session.decision
    if d is None:
        return '<section id="decision"><h1>Decision: none taken yet</h1></section>'
    bar = ""
    if d.gain is not None:
        bar = (
            f'<div class="gain"><div class="track" title="share of the step the cause can remove">'
            f'<div class="bar" style="width: {100 * d.gain.share_of_step:.1f}%"></div></div></div>'
        )
    undo = "".join(f"<li><code>{escape(u.metric.value)}</code>: revert if {escape(u.revert_if)}</li>" for u in d.undo)
    note = f"<p>{escape(d.note)}</p>" if d.note else ""
    return (
        f'<section id="decision"><h1>Decision: {escape(d.remedy.action)}</h1>'
        f"<p>addresses <code>{escape(d.hypothesis)}</code> {escape(d.title)}</p>{bar}"
        f"<p>predicted gain: {escape(prediction_text(d))}</p>"
        f"<p>cost: {escape(d.remedy.cost)}; risk: {escape(d.remedy.risk)}</p>{note}"
        f'<h2>Undo criteria: watch these after the change</h2><ul class="undo">{undo or "<li>none given</li>"}</ul></section>'
    )


def _marks_html(session: Session) -> str:
    items = "".join(
        f"<li><code>{escape(hid)}</code> {escape(m.status.value if m.status else 'open')}{': ' + escape(m.note) if m.note else ''}</li>"
        for hid, m in session.marks.items()
        if m.status or m.note
    )
    return f'<section id="marks"><h2>Marks</h2><ul>{items}</ul></section>' if items else ""


def _answers_html(session: Session) -> str:
    items = "".join(f"<li><code>{escape(a.input)}</code>: {escape(field_value(a.input, a.value))}</li>" for a in session.answers)
    return f'<section id="answers"><h2>Answers</h2><ul>{items}</ul></section>' if items else ""


def render_session_html(session: Session, diagnosis: Diagnosis) -> str:
    page = render_html(diagnosis, session_verdict(session, diagnosis), mark_labels(session), chart_inputs(session.case))
    head, sep, rest = page.partition("<body>\n")
    return head + sep + _decision_html(session) + _marks_html(session) + _answers_html(session) + "\n" + rest


def render_session_json(session: Session, diagnosis: Diagnosis) -> str:
    report = SessionReport(
        decision=session.decision,
        marks=session.marks,
        answers=session.answers,
        sources=session.sources,
        diagnosis=diagnosis,
    )
    return report.model_dump_json(indent=2) + "\n"
