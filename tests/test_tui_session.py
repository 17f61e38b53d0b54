"""Sessions: saved whole after every change, resumed with the same marks, notes and answers,
and refused in one line when truncated, corrupt or written by a newer diagnoser."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli
from tui_support import example_copy, make_app, run

from diagnoser.errors import InputError
from diagnoser.models.case import load_case
from diagnoser.models.session import (
    SESSION_SCHEMA_VERSION,
    Answer,
    HypothesisMark,
    Mark,
    Session,
    load_session,
    looks_like_session,
    save_session,
    session_text,
)
from diagnoser.session_ops import (
    FieldErrors,
    apply_answer,
    cause_ranking,
    decide,
    merge_case,
    pin_workload,
    ranking_changes,
)
from diagnoser.tui.workspace import Workspace

# No emission time, so no refinement says where the gap is and the gap itself leads.
BOUNDARIES = Answer(input="boundaries", value={"device_step_ms": 16, "client_receipt_ms": 30})


@pytest.fixture
def case(tmp_path):
    return load_case(example_copy(tmp_path))


def test_an_answer_becomes_a_fact_and_moves_the_ranking(case, tmp_path):
    ws = Workspace(Session(case=case), tmp_path / "s.session.json")
    before = ws.diagnosis
    answered = apply_answer(case, BOUNDARIES)
    assert answered.observations.boundaries.client_receipt_ms == 30
    assert answered.observations.budget == case.observations.budget  # the rest of the case is kept
    ws.update(ws.session.model_copy(update={"case": answered, "answers": [BOUNDARIES]}))
    assert cause_ranking(ws.diagnosis)[0] == "client-gap"
    assert "client-gap: new, ranks 1" in ranking_changes(before, ws.diagnosis)


def test_one_field_answer_and_field_level_errors(case):
    one = apply_answer(case, Answer(input="boundaries.device_step_ms", value=15.5))
    assert one.observations.boundaries.device_step_ms == 15.5
    with pytest.raises(FieldErrors) as err:
        apply_answer(case, Answer(input="boundaries", value={"client_receipt_ms": -1, "ttft_ms": "soon"}))
    assert set(err.value.fields) == {"client_receipt_ms", "ttft_ms"}
    with pytest.raises(FieldErrors) as err:
        apply_answer(case, Answer(input="gemm_sweep", value=[{"shape": "x", "dtype": "fp8", "m": 0, "time_us": 1, "bw_fraction": 0.5}]))
    assert list(err.value.fields) == ["0.m"]
    with pytest.raises(InputError, match="Pin screen"):
        apply_answer(case, Answer(input="bound", value={}))


def test_pin_errors_name_their_field(case):
    doc = case.workload.model_dump(mode="json")
    with pytest.raises(FieldErrors) as err:
        pin_workload(case, {**doc, "batch": 0, "layout": {"tp": "two"}})
    assert {"batch", "layout.tp"} <= set(err.value.fields)
    with pytest.raises(FieldErrors) as err:
        pin_workload(case, {**doc, "model": "no-such-model"})
    assert list(err.value.fields) == ["model"]
    assert pin_workload(case, {**doc, "batch": 16}).workload.batch == 16


def test_a_case_loaded_as_evidence_merges_its_sections(case):
    from diagnoser.models.case import Case

    evidence = Case.model_validate({"observations": {"host": {"scheduler_ms": 0.2}}})
    merged, sections = merge_case(case, evidence)
    assert sections == ["observations.host"]
    assert merged.observations.host.scheduler_ms == 0.2 and merged.observations.budget == case.observations.budget
    assert merged.workload == case.workload


def test_session_round_trip_keeps_marks_notes_answers_and_decision(case, tmp_path):
    ws = Workspace(Session(case=apply_answer(case, BOUNDARIES), answers=[BOUNDARIES]), tmp_path / "s.session.json")
    decision = decide(ws.diagnosis, "client-gap", 0, note="cheapest first")
    session = ws.session.model_copy(update={
        "marks": {"client-gap": HypothesisMark(status=Mark.confirmed, note="gaps line up"), "launch-gaps": HypothesisMark(status=Mark.refuted)},
        "decision": decision,
    })
    ws.update(session)
    again = load_session(tmp_path / "s.session.json")
    assert again == session
    assert decision.remedy == ws.diagnosis.hypotheses[0].remedies[0] and decision.undo == ws.diagnosis.hypotheses[0].undo


def test_closed_and_reopened_app_shows_the_same_marks_notes_and_answers(tmp_path):
    source = example_copy(tmp_path)
    path = tmp_path / "case-moe-small-experts.session.json"

    async def mark_and_close():
        app = make_app(source, start="hypotheses")
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            await pilot.press("down", "r", "e")  # launch-gaps: refuted, with a note
            await pilot.pause()
            await pilot.press(*list("replay did not help"), "ctrl+s")
            await pilot.pause()
            app.commit(app.workspace.session.model_copy(update={
                "case": apply_answer(app.workspace.session.case, BOUNDARIES), "answers": [BOUNDARIES]}))
            await pilot.press("ctrl+q")

    async def reopen():
        app = make_app(path)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            screen = app.screen
            assert type(screen).__name__ == "HypothesesScreen"  # a session resumes on the hypotheses
            listing = screen.query_one("#hyp-list")
            label = next(listing.get_option(o.id).prompt for o in listing.options if o.id == "launch-gaps")
            assert "✗" in label.plain and any("strike" in str(span.style) for span in label.spans)
            screen.query_one("#hyp-list").highlighted = listing.get_option_index("launch-gaps")
            await pilot.pause()
            assert "refuted: replay did not help" in str(screen.query_one("#hyp-text").render())
            return app.workspace.session

    run(mark_and_close())
    assert looks_like_session(path)
    session = run(reopen())
    assert session.marks["launch-gaps"] == HypothesisMark(status=Mark.refuted, note="replay did not help")
    assert session.answers == [BOUNDARIES]
    assert cause_ranking(make_app(path).workspace.diagnosis)[0] == "client-gap"


def _saved(tmp_path, case) -> tuple:
    path = tmp_path / "s.session.json"
    save_session(path, Session(case=case))
    return path, path.read_text()


@pytest.mark.parametrize("cut", [0.5, 0.99])
def test_a_truncated_session_is_refused_in_one_line(case, tmp_path, cut):
    path, text = _saved(tmp_path, case)
    path.write_text(text[: int(len(text) * cut)])
    with pytest.raises(InputError, match="truncated or corrupt session"):
        load_session(path)
    out = run_cli("tui", str(path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "truncated or corrupt session" in out.stderr
    assert path.read_text() == text[: int(len(text) * cut)]  # never rewritten


def test_a_newer_or_corrupt_session_is_refused(case, tmp_path):
    path, text = _saved(tmp_path, case)
    doc = json.loads(text)
    path.write_text(json.dumps({**doc, "schema_version": SESSION_SCHEMA_VERSION + 1}))
    out = run_cli("tui", str(path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "newer diagnoser" in out.stderr
    path.write_text(json.dumps({**doc, "marks": {"x": {"status": "maybe"}}}))
    with pytest.raises(InputError, match="marks.x.status"):
        load_session(path)


def test_the_session_file_is_never_half_written(case, tmp_path, monkeypatch):
    path, text = _saved(tmp_path, case)
    import os

    def interrupted(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(InputError, match="cannot write"):
        save_session(path, Session(case=case, answers=[BOUNDARIES]))
    assert path.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, "case-moe-small-experts.yaml"])


def test_without_a_terminal_tui_prints_the_text_diagnosis(tmp_path):
    source = example_copy(tmp_path)
    out = run_cli("tui", str(source))
    diagnosed = run_cli("diagnose", str(source))
    assert out.returncode == 0 and out.stdout == diagnosed.stdout
    assert not (tmp_path / "case-moe-small-experts.session.json").exists()  # nothing changed, nothing saved
    assert session_text(Session(case=load_case(source))).startswith('{\n  "document": "diagnoser-session"')


def test_answer_forms_follow_the_case_model():
    from diagnoser.tui.fields import answer_form, error_for, nested, parse_text

    graph = {f.key: f for f in answer_form("graph").fields}
    assert graph["status"].kind == "choice" and graph["status"].choices == ("none", "partial", "full")
    assert {f.key: f.kind for f in answer_form("server").fields}["cuda_graphs"] == "flag"
    assert [f.key for f in answer_form("boundaries.device_step_ms").fields] == ["device_step_ms"]
    sweep = answer_form("gemm_sweep")
    assert not sweep.fields and "- {shape: , dtype: , m: , time_us: , bw_fraction: }" in sweep.template
    assert (parse_text("16"), parse_text("[1, 2]"), parse_text("nvlink"), parse_text("  ")) == (16, [1, 2], "nvlink", None)
    assert nested({"layout.tp": 2, "batch": 8, "observed.step_ms": None}) == {"layout": {"tp": 2}, "batch": 8}
    keys = ["observed.step_ms", "observed.tokens_per_s", "batch"]
    assert error_for("observed.step_ms", {"observed": "give step_ms or tokens_per_s"}, keys) == "give step_ms or tokens_per_s"
    assert error_for("observed.tokens_per_s", {"observed": "give step_ms or tokens_per_s"}, keys) is None


def test_exports_open_with_the_decision_then_the_ordinary_report(case, tmp_path):
    from diagnoser.models.session import SessionReport
    from diagnoser.report import render_html
    from diagnoser.session_report import render_session_html, render_session_json, render_session_markdown
    from diagnoser.chart_inputs import chart_inputs
    from diagnoser.session_verdict import mark_labels, session_verdict

    ws = Workspace(Session(case=case), None)
    decision = decide(ws.diagnosis, "small-expert-kernels", 0)
    session = ws.session.model_copy(update={"decision": decision, "marks": {"launch-gaps": HypothesisMark(status=Mark.refuted)}})
    page = render_session_html(session, ws.diagnosis)
    assert page.index('<section id="decision">') < page.index("<h1>Diagnosis")
    assert f'width: {100 * decision.gain.share_of_step:.1f}%' in page  # the gain bar
    ordinary = render_html(ws.diagnosis, session_verdict(session, ws.diagnosis), mark_labels(session), chart_inputs(session.case))
    assert page.endswith(ordinary.partition("<body>\n")[2])  # the ordinary page follows, with the marks and the session's verdict
    assert all(u.revert_if.replace("'", "&#x27;") in page for u in decision.undo)
    exported = SessionReport.model_validate_json(render_session_json(session, ws.diagnosis))
    assert exported.decision == decision and exported.diagnosis == ws.diagnosis
    assert render_session_markdown(session.model_copy(update={"decision": None}), ws.diagnosis).startswith("# Decision: none taken yet")


def test_bad_sources_are_one_line_and_exit_2(tmp_path):
    bad_case = tmp_path / "bad.yaml"
    bad_case.write_text("workload: {batch: 0}\n")
    for source, needle in ((tmp_path / "missing.yaml", "no such file"), (bad_case, "workload.batch"), (tmp_path, "directory")):
        out = run_cli("tui", str(source))
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and needle in out.stderr, (source, out.stderr)


def test_a_save_that_fails_is_said_and_changes_nothing(tmp_path):
    from diagnoser.tui.app import DiagnoserApp

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    ws = Workspace(Session(case=load_case(example_copy(tmp_path))), blocker / "s.session.json")

    async def scenario():
        app = DiagnoserApp(ws, start="hypotheses")
        async with app.run_test(size=(100, 30), notifications=True) as pilot:
            await pilot.pause()
            await pilot.press("c")
            await pilot.pause()
            assert ws.session.marks == {} and ws.revision == 0
            assert any("cannot write" in n.message for n in app._notifications)

    run(scenario())
