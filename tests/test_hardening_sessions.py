"""Saved sessions under two TUIs at once, kept private, behind a symlink, or holding a case no file could."""

from __future__ import annotations

import json
import os

import pytest

from diagnoser.errors import InputError
from diagnoser.models.session import HypothesisMark, Mark, Session, load_session, save_session
from diagnoser.tui.workspace import Workspace


def _marked(workspace: Workspace, key: str, mark: Mark) -> None:
    session = workspace.session
    workspace.update(session.model_copy(update={"marks": {**session.marks, key: HypothesisMark(status=mark, note=key)}}))


def test_two_tuis_on_one_session_file_keep_every_mark(tmp_path):
    path = tmp_path / "s.json"
    save_session(path, Session())
    first, second = Workspace(load_session(path), path), Workspace(load_session(path), path)
    _marked(first, "a", Mark.confirmed)
    _marked(second, "b", Mark.refuted)
    _marked(first, "c", Mark.needs_data)
    _marked(second, "a", Mark.refuted)  # both changed "a": the later change wins, nothing is dropped
    assert {k: m.status for k, m in load_session(path).marks.items()} == {"a": Mark.refuted, "b": Mark.refuted, "c": Mark.needs_data}
    assert set(second.session.marks) == {"a", "b", "c"}


def test_saving_keeps_the_mode_and_the_symlink(tmp_path):
    real = tmp_path / "real.json"
    save_session(real, Session())
    real.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    _marked(Workspace(load_session(link), link), "a", Mark.confirmed)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.stat().st_mode & 0o777 == 0o600
    assert "a" in load_session(real).marks


@pytest.mark.parametrize("version", [99, True, "1", None])
def test_a_session_holding_an_unreadable_case_is_refused_like_the_case_file(tmp_path, version):
    doc = json.loads(Session().model_dump_json())
    doc["case"]["schema_version"] = version
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="session: case: schema_version .* not supported"):
        load_session(path)
