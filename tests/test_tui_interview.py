"""The interview never takes a stage key as an answer, says what a question's weight means, and
asks for a section once."""

from __future__ import annotations

from tui_support import example_copy, make_app, run, shown_text

from diagnoser.tui.screens.interview import WEIGHT_MEANING


def test_digits_change_stage_until_the_user_goes_into_the_answer(tmp_path):
    case = example_copy(tmp_path)

    async def walk():
        app = make_app(case, start="interview")
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            screen = app.screen
            assert type(screen).__name__ == "InterviewScreen"
            assert screen.focused is screen.query_one("#interview-view")  # the question, not the answer box
            text = shown_text(screen.query_one("#question"))
            assert f"weight {screen.question.score:g}: " in text and WEIGHT_MEANING.split(",")[0] in " ".join(text.split())
            await pilot.press("enter")
            await pilot.pause()
            answer = screen.focused
            assert answer is not None and answer in screen.query_one("#answer").query("*")
            await pilot.press("7")  # typed into the answer, not a stage change
            await pilot.pause()
            assert app.screen is screen and "7" in (getattr(answer, "value", None) or getattr(answer, "text", ""))
            await pilot.press("escape", "5")
            await pilot.pause()
            assert type(app.screen).__name__ == "HypothesesScreen"
            await pilot.press("4")
            await pilot.pause()
            assert type(app.screen).__name__ == "InterviewScreen"
            await pilot.press("6")  # straight back in, the focus is on the question again: a stage key
            await pilot.pause()
            assert type(app.screen).__name__ == "WhatIfScreen"

    run(walk())


def test_a_section_and_one_of_its_fields_are_one_question(tmp_path):
    app = make_app(example_copy(tmp_path), start="interview")
    questions = app.workspace.diagnosis.questions
    inputs = {q.input for q in questions}
    assert not any("." in name and name.partition(".")[0] in inputs for name in inputs)
    boundaries = next(q for q in questions if q.input == "boundaries")
    assert boundaries.label == "boundary timings, above all device_step_ms"
