"""The open session and everything derived from it, kept consistent and saved on every change.

Screens read the diagnosis and the bound from here and hand back a new ``Session``; they never
run the engine or the bound themselves. A change the engine or the bound rejects leaves the
workspace as it was and raises, so the screen can show why. Nothing here imports Textual.
"""

from __future__ import annotations

from pathlib import Path

from diagnoser.bound import BoundReport
from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.hypothesis import Diagnosis
from diagnoser.models.session import Session
from diagnoser.tui.session_store import save_merged


def evaluate(case: Case, rulebook) -> tuple[Diagnosis, BoundReport | None]:
    """The engine's diagnosis of ``case`` and the per-rank bound of its pin (None without a complete pin)."""
    from diagnoser.bound import compute_bound
    from diagnoser.engine import diagnose
    from diagnoser.engine.runner import incomplete_pin

    try:
        diagnosis = diagnose(case, rulebook)
    except InputError as err:  # the bound rejected the pinned workload
        raise InputError(f"workload: {err}") from None
    bound = None
    if case.workload is not None and incomplete_pin(case) is None:
        bound = compute_bound(case.workload)
    return diagnosis, bound


class Workspace:
    def __init__(self, session: Session, path: Path | None, rulebook=None, inputs: tuple[Path, ...] = ()) -> None:
        from diagnoser.engine import load_rulebook

        self.rulebook = rulebook if rulebook is not None else load_rulebook(())
        self.path = path
        self.inputs = inputs  # the files it was opened from: no export may overwrite them
        self.session = session
        self.saved = session  # as last read or written: what another TUI's changes are merged against
        self.diagnosis, self.bound = evaluate(session.case, self.rulebook)
        self.revision = 0

    def update(self, session: Session) -> None:
        """Adopt ``session``: re-run the engine when the case changed and save it, merged with any other
        TUI's saves to the same file; on any error, change nothing."""
        derived = evaluate(session.case, self.rulebook) if session.case != self.session.case else (self.diagnosis, self.bound)
        if self.path is not None:
            merged = save_merged(self.path, self.saved, session)
            if merged.case != session.case:
                derived = evaluate(merged.case, self.rulebook)
            self.saved = session = merged
        self.session = session
        self.diagnosis, self.bound = derived
        self.revision += 1
