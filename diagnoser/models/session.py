"""The guided session: one investigation's case and what the engineer made of it, in one file.

``diagnoser tui`` saves after every change and resumes from this file, so the case as it now
stands (pin edited, evidence merged, questions answered), the answers themselves, the marks
and notes on each hypothesis, where each piece of evidence came from, and the decision all
travel together. The decision keeps the remedy, gain and undo criteria as they were when it
was taken: a later change to the rules must not rewrite what was promised.

A session opens with ``"document": "diagnoser-session"`` so a file can be told from a case by
its first line, even when the rest of it is damaged.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.hypothesis import Diagnosis, Remedy, UndoCriterion
from diagnoser.whatif import BoundedGain

SESSION_SCHEMA_VERSION = 1
SESSION_DOCUMENT = "diagnoser-session"
_HEAD = re.compile(r'^\s*\{\s*"document"\s*:\s*"' + SESSION_DOCUMENT + '"')


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Mark(str, Enum):
    """What the engineer concluded about a hypothesis after running its check."""

    confirmed = "confirmed"
    refuted = "refuted"
    needs_data = "needs_data"


class HypothesisMark(_Doc):
    status: Mark | None = Field(default=None, description="confirmed, refuted or needs_data; none while undecided")
    note: str = Field(default="", description="the engineer's note: what was run, what it showed")


class Answer(_Doc):
    """A reply to one of the engine's next questions; applied to the case, it becomes a fact."""

    input: str = Field(description="the case input the question asked for, e.g. boundaries or boundaries.device_step_ms")
    value: Any = Field(description="the value given: a mapping for a section, a list for a list input, a number or text for one field")


class SourceKind(str, Enum):
    case = "case"
    pin = "pin"
    probe_report = "probe_report"
    probes = "probes"
    traces = "traces"
    answer = "answer"


class Source(_Doc):
    """Where a piece of the case came from, so the evidence table can say it."""

    kind: SourceKind
    label: str = Field(description="the file, command or question it came from")
    sections: list[str] = Field(default_factory=list, description="case sections it set: workload, observations.<name>")


class Decision(_Doc):
    """The remedy chosen, with what the diagnosis predicted for it when it was chosen."""

    hypothesis: str = Field(description="id of the hypothesis the remedy addresses")
    title: str
    remedy: Remedy
    gain: BoundedGain | None = Field(default=None, description="the hypothesis's bounded gain at the time")
    undo: list[UndoCriterion] = Field(default_factory=list, description="what to watch after the change, and when to revert")
    note: str = ""


class Session(_Doc):
    document: Literal["diagnoser-session"] = SESSION_DOCUMENT
    schema_version: int = SESSION_SCHEMA_VERSION
    case: Case = Field(default_factory=Case, description="the case as it stands now")
    answers: list[Answer] = Field(default_factory=list, description="questions answered, in order")
    marks: dict[str, HypothesisMark] = Field(default_factory=dict, description="hypothesis id -> mark and note")
    sources: list[Source] = Field(default_factory=list, description="where each part of the case came from, oldest first")
    decision: Decision | None = None


def looks_like_session(path: str | Path) -> bool:
    """True when the file starts the way a saved session does (damaged or not)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(256).decode("utf-8", errors="replace")
    except OSError:
        return False
    return bool(_HEAD.match(head))


def load_session(path: str | Path) -> Session:
    """A saved session, or one line saying why not: truncated, corrupt, newer or invalid."""
    from diagnoser.jsondoc import read_json

    try:
        data = read_json(path, "a diagnoser session")
    except InputError as err:
        raise InputError(f"{err} (a truncated or corrupt session is not opened)") from None
    if not isinstance(data, dict) or data.get("document") != SESSION_DOCUMENT:
        raise InputError(f"{path}: not a diagnoser session (no \"document\": \"{SESSION_DOCUMENT}\")")
    version = data.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise InputError(f"{path}: session without a valid schema_version")
    if version > SESSION_SCHEMA_VERSION:
        raise InputError(
            f"{path}: session version {version} was written by a newer diagnoser (this one reads {SESSION_SCHEMA_VERSION}); upgrade to open it"
        )
    from diagnoser.models.case import READABLE_CASE_VERSIONS
    from diagnoser.models.documents import check_version, validation_message

    if isinstance(data.get("case"), dict):  # the case inside is held to what its own file would be
        check_version(data["case"], f"{path}: session: case", READABLE_CASE_VERSIONS)
    try:
        return Session.model_validate(data)
    except ValidationError as err:
        raise InputError(validation_message(err, f"{path}: session", Session)) from None


def session_text(session: Session) -> str:
    return session.model_dump_json(indent=2) + "\n"


def save_session(path: str | Path, session: Session) -> Path:
    """Written whole or not at all: a crash mid-save leaves the previous session in place.

    A symlinked session is saved through the link (the link stays a link) and an existing file
    keeps its mode: a session kept private (0600) must not become readable by saving it.
    """
    import os
    import stat

    from diagnoser.fileio import write_atomic

    target = Path(os.path.realpath(path))
    mode = stat.S_IMODE(target.stat().st_mode) if target.is_file() else None
    write_atomic(target, session_text(session), mode=mode)
    return Path(path)


class SessionReport(_Doc):
    """What ``diagnoser tui`` exports as JSON: the decision and the engineer's marks beside the diagnosis."""

    document: Literal["diagnoser-session-report"] = "diagnoser-session-report"
    schema_version: int = SESSION_SCHEMA_VERSION
    decision: Decision | None
    marks: dict[str, HypothesisMark]
    answers: list[Answer]
    sources: list[Source]
    diagnosis: Diagnosis
