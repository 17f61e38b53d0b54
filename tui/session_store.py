"""Saving a session that another TUI may have open too: under a lock, merged with what is on disk.

Each TUI saves on every change. Writing its own copy whole would silently drop the marks the
other one saved in between, so a save reads the file as it is now and keeps every change the
other made since this TUI last read or wrote it, adding this TUI's own changes on top. Nothing
here imports Textual.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from diagnoser.errors import InputError
from diagnoser.models.session import Session, load_session, save_session


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the session's folder: the file itself is replaced by every save, so a
    lock on it would be held on a file nobody opens any more."""
    fd = os.open(Path(os.path.realpath(path)).parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _ours_over_theirs(base: list, ours: list, theirs: list) -> list:
    """Theirs, then what ours appended since base that theirs lacks (answers and sources only grow)."""
    return theirs + [item for item in ours[len(base):] if item not in theirs]


def merge(base: Session, ours: Session, theirs: Session) -> Session:
    """Three-way: ``theirs`` (on disk now) with what ``ours`` changed since ``base`` (last read or
    written here). A mark either side set survives; where both changed the same one, ours wins."""
    if theirs == base:
        return ours
    marks = dict(theirs.marks)
    for key in ours.marks.keys() | base.marks.keys():
        if ours.marks.get(key) != base.marks.get(key):
            if key in ours.marks:
                marks[key] = ours.marks[key]
            else:
                marks.pop(key, None)
    return ours.model_copy(update={
        "case": ours.case if ours.case != base.case else theirs.case,
        "decision": ours.decision if ours.decision != base.decision else theirs.decision,
        "marks": marks,
        "answers": _ours_over_theirs(base.answers, ours.answers, theirs.answers),
        "sources": _ours_over_theirs(base.sources, ours.sources, theirs.sources),
    })


def save_merged(path: Path, base: Session, ours: Session) -> Session:
    """Save ``ours`` merged with the file's current content; the session as saved comes back."""
    with _locked(path):
        try:
            theirs = load_session(path) if path.exists() else base
        except InputError:  # damaged on disk: nothing of it can be kept
            theirs = base
        merged = merge(base, ours, theirs)
        save_session(path, merged)
    return merged
