"""The verdict of a guided session: the diagnosis's verdict once the engineer's marks and decision count.

The engine ranks causes by evidence alone; a cause the engineer refuted with its check must
not stay "the leading cause" in a report that also lists the refutation, and a decision taken
is the conclusion a reader looks for first. The ordinary verdict is kept for what it says about
the causes still standing, so the wording matches ``diagnose``.
"""

from __future__ import annotations

from diagnoser.models.hypothesis import Diagnosis
from diagnoser.models.session import Mark, Session
from diagnoser.report.diagnosis import verdict_line


def marked(session: Session, status: Mark) -> list[str]:
    """Hypothesis ids with that mark, in the order they were marked."""
    return [hid for hid, m in session.marks.items() if m.status is status]


def session_verdict(session: Session, diagnosis: Diagnosis) -> str:
    """``Verdict: decided ...; confirmed ...; leading cause <first not refuted> ...; refuted ...``."""
    refuted = marked(session, Mark.refuted)
    standing = diagnosis.model_copy(update={"hypotheses": [h for h in diagnosis.hypotheses if h.id not in refuted]})
    parts = []
    if session.decision is not None:
        parts.append(f"decided: {session.decision.remedy.action} (for {session.decision.hypothesis})")
    confirmed = marked(session, Mark.confirmed)
    if confirmed:
        parts.append(f"confirmed by its check: {', '.join(confirmed)}")
    parts.append(verdict_line(standing).removeprefix("Verdict: "))
    if refuted:
        parts.append(f"refuted by its check: {', '.join(refuted)}")
    return "Verdict: " + "; ".join(parts)


def mark_labels(session: Session) -> dict[str, str]:
    """Hypothesis id -> what the engineer concluded, for the report to print beside each hypothesis."""
    return {hid: m.status.value.replace("_", " ") for hid, m in session.marks.items() if m.status is not None}
