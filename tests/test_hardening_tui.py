"""Untrusted text in the TUI: a session's source label and a typed GPU that look like markup are shown, not parsed."""

from __future__ import annotations

from tui_support import example_copy, field, make_app, run, type_into

from diagnoser.models.case import load_case
from diagnoser.models.session import Session, Source, SourceKind, save_session

MARKUP = "[/]x [bold]\x1b[2J"


def test_a_source_label_of_markup_shows_on_the_evidence_screen(tmp_path):
    session_path = tmp_path / "s.json"
    source = Source(kind=SourceKind.case, label=MARKUP, sections=["workload", "observations.budget"])
    save_session(session_path, Session(case=load_case(example_copy(tmp_path)), sources=[source]))

    async def scenario():
        app = make_app(session_path, start="evidence")
        async with app.run_test() as pilot:
            await pilot.pause()
            assert app.is_running and app.screen.query_one("#sources") is not None

    run(scenario())


def test_a_gpu_typed_as_markup_is_saved_and_the_pin_screen_still_opens(tmp_path):
    case = example_copy(tmp_path)

    async def scenario(typed: bool):
        app = make_app(case, start="pin")
        async with app.run_test() as pilot:
            if typed:
                await type_into(pilot, field(app.screen, "hardware"), "[/]x")
                await pilot.press("ctrl+s")
            await pilot.pause()
            assert app.is_running and app.screen.query_one("#pin-status") is not None

    run(scenario(True))
    run(scenario(False))
