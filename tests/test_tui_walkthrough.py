"""The Walkthrough screen, driven by keys through Pilot: the same run as ``diagnoser walkthrough``.

Every figure the screen shows is compared with the ``WalkthroughRun`` behind it, so the test
also checks that the screen computes nothing of its own.
"""

from __future__ import annotations

from conftest import run_cli
from tui_support import make_app, run, shown_text

from diagnoser.walkthroughs import load_catalogue
from diagnoser.walkthroughs.result import Outcome


def test_decode_gap_from_the_sidebar_right_trap_and_the_score_by_skill():
    async def scenario():
        app = make_app(None, start="pin")
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("escape", "8")
            await pilot.pause()
            screen = app.screen
            assert type(screen).__name__ == "WalkthroughScreen"
            listing = screen.query_one("#wt-list")
            assert [o.id for o in listing.options] == sorted(load_catalogue())  # the CLI's catalogue
            await pilot.press("end", "enter")  # decode-gap sorts last
            await pilot.pause()
            assert screen.run.prepared.doc.name == "decode-gap"
            assert "skills scored: method, floor" in shown_text(screen.query_one("#wt-scenario-text"))

            # Step 1, an ordering typed as letters: an unreadable answer is asked again, then the right one.
            await pilot.press("enter")
            await pilot.pause()
            assert screen.view.id == "approach" and app.focused.id == "wt-answer"
            await pilot.press(*"b d x", "enter")
            await pilot.pause()
            assert "cannot read that: expected all 6 items" in shown_text(screen.query_one("#wt-error"))
            assert screen.verdict is None and not screen.run.verdicts
            await pilot.press("ctrl+u", *"b d a e c f", "enter")
            await pilot.pause()
            assert screen.verdict.outcome is Outcome.correct
            assert shown_text(screen.query_one("#wt-verdict")).startswith("[correct] pin > bound > trace")

            # Step 2, a choice picked by its letter: the named trap, explained in the rule base's words.
            await pilot.press("enter")
            await pilot.pause()
            assert screen.view.id == "first-check" and app.focused.id == "wt-choices"
            trap = next(o.letter for o in screen.view.options if o.id == "misconfigured")
            await pilot.press(trap, "enter")
            await pilot.pause()
            verdict = screen.verdict
            assert verdict.outcome is Outcome.trap and verdict.trap == "misconfigured"
            shown = " ".join(shown_text(screen.query_one("#wt-verdict")).split())
            assert shown.startswith(f"[trap: misconfigured] {verdict.read_as}")
            assert f"expected: {verdict.expected}" in shown
            assert "lesson low-fraction-not-a-diagnosis" in shown and " ".join(verdict.why[0].split()) in shown

            # Step 3 skipped, then finished early: the score and its per-skill breakdown.
            await pilot.press("ctrl+n", "ctrl+n")
            await pilot.pause()
            assert screen.verdict.outcome is Outcome.skipped and screen.verdict.step == "floor-ms"
            await pilot.press("ctrl+f")
            await pilot.pause()
            result = screen.run.result()
            assert screen.result == result and not result.complete and result.earned == 1
            scored = shown_text(screen.query_one("#wt-result"))
            assert scored.startswith(f"score: 1 / {result.possible:g} ({result.percent:.0f} %) - stopped before the end")
            skills = {s.skill for s in result.skills}
            rows = {line.split()[0]: line.split()[1] for line in scored.splitlines() if line.split() and line.split()[0] in skills}
            assert rows == {s.skill: f"{s.earned:g}/{s.possible:g}" for s in result.skills}
            assert "traps fallen into: first-check (misconfigured)" in scored
            assert screen.query_one("#wt-list").display  # another one can be picked from here

    run(scenario())


def test_the_palette_and_the_command_line_open_a_walkthrough(tmp_path):
    async def scenario():
        app = make_app(None, start="pin", walkthrough="case-d16-graph-replay")
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert app.screen.run.prepared.doc.name == "case-d16-graph-replay"
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert [t for t in titles if t.startswith("Walkthrough: ")] == [f"Walkthrough: {n}" for n in sorted(load_catalogue())]
            await pilot.press("ctrl+p")
            await pilot.pause()
            await pilot.press(*"Walkthrough: decode-gap", "enter")
            await pilot.pause()
            assert app.screen.run.prepared.doc.name == "decode-gap" and app.screen.view is None  # the scenario first

    run(scenario())
    out = run_cli("tui", "--walkthrough", "decode-gpa", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "nearest: decode-gap" in out.stderr
