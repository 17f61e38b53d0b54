"""The guided session end to end on the bundled example, driven by keys through Pilot.

pin -> bound -> evidence -> one interview answer (the ranking moves) -> a hypothesis marked
confirmed -> what-if -> a decision -> Markdown export holding the remedy, its predicted gain
and its undo criteria.
"""

from __future__ import annotations

from tui_support import example_copy, field, make_app, run, type_into

from diagnoser.models.session import Mark
from diagnoser.session_ops import cause_ranking

EVIDENCE = """\
observations:
  host: {gap_between_steps_ms: 0.3, scheduler_ms: 0.2}
"""


def test_the_whole_flow(tmp_path):
    case = example_copy(tmp_path)
    evidence = tmp_path / "host-profile.yaml"
    evidence.write_text(EVIDENCE)

    async def walk():
        app = make_app(case, start="pin")
        async with app.run_test(size=(100, 30)) as pilot:
            ws = app.workspace
            # Pin: a measured bandwidth replaces the datasheet figure; the bound follows.
            assert type(app.screen).__name__ == "PinScreen"
            datasheet_floor = ws.bound.floor_ms
            await type_into(pilot, field(app.screen, "measured_bandwidth_gbs"), "3000")
            await pilot.press("ctrl+s")
            await pilot.pause()
            assert ws.session.case.workload.measured_bandwidth_gbs == 3000
            assert ws.bound.floor_ms > datasheet_floor

            # Bound: the per-rank components and the observed comparison are drawn.
            await pilot.press("escape", "2")
            await pilot.pause()
            assert type(app.screen).__name__ == "BoundScreen"
            components = app.screen.query_one("#bound-components")
            assert "routed_experts" in [row[0] for row in components.rows]
            assert "unexplained" in str(app.screen.query_one("#bound-compare").render())

            # Evidence: a host profile's sections merge in and say where they came from.
            await pilot.press("3")
            await pilot.pause()
            await pilot.press("p")
            app.screen.query_one("#evidence-path").value = str(evidence)  # a long path: set, not typed
            await pilot.press("ctrl+o")
            await pilot.pause()
            assert ws.session.case.observations.host.scheduler_ms == 0.2
            assert ws.session.sources[-1].label == "host-profile.yaml"
            table = app.screen.query_one("#observations")
            assert any(table.get_row_at(i)[:2] == ["host", "host-profile.yaml"] for i in range(table.row_count))

            # Interview: answer the boundary timings; the client gap takes the lead.
            await pilot.press("escape", "4")
            await pilot.pause()
            screen = app.screen
            for _ in range(len(ws.diagnosis.questions)):
                if screen.question.input == "boundaries":
                    break
                await pilot.press("ctrl+n")
                await pilot.pause()
            assert screen.question.input == "boundaries"
            before = cause_ranking(ws.diagnosis)
            await type_into(pilot, field(screen, "device_step_ms"), "16")
            # no emission time: nothing yet says which boundary holds the gap, so the gap itself leads
            await type_into(pilot, field(screen, "client_receipt_ms"), "30")
            await pilot.press("ctrl+s")
            await pilot.pause()
            after = cause_ranking(ws.diagnosis)
            assert after != before and after[0] == "client-gap"
            assert ws.session.answers[-1].input == "boundaries"
            assert ws.session.answers[-1].value == {"device_step_ms": 16, "client_receipt_ms": 30}
            assert "client-gap: new, ranks 1" in str(screen.query_one("#changes").render())

            # Hypotheses: the leading cause is marked confirmed, with a note.
            await pilot.press("escape", "5")
            await pilot.pause()
            assert app.screen.selected.id == "client-gap"
            await pilot.press("c", "e")
            await pilot.pause()
            await pilot.press(*list("receipt gaps match"), "ctrl+s")
            await pilot.pause()
            mark = ws.session.marks["client-gap"]
            assert mark.status is Mark.confirmed and mark.note == "receipt gaps match"

            # What-if: Amdahl is prefilled from the budget and follows an edit.
            await pilot.press("6")
            await pilot.pause()
            result = app.screen.query_one("#amdahl-result")
            assert "16 / 14.5" in str(result.render())
            await type_into(pilot, field(app.screen, "amdahl.new_ms"), "0.5")
            assert "16 / 15 " in str(result.render())

            # Decision: the first remedy of the confirmed cause, then the Markdown export.
            await pilot.press("escape", "7")
            await pilot.pause()
            await pilot.press("enter")
            await pilot.pause()
            decision = ws.session.decision
            assert decision is not None and decision.hypothesis == "client-gap"
            await pilot.press("m")
            await pilot.pause()
            # the export asks where, offering the session's folder in full
            path = app.screen.query_one("#export-path")
            assert path.value == str((tmp_path / "case-moe-small-experts.report.md").absolute())
            await pilot.press("enter")
            await pilot.pause()
            status = str(app.screen.query_one("#export-status").render())
            assert status == f"wrote case-moe-small-experts.report.md in {tmp_path.absolute()}"
            return decision

    decision = run(walk())
    report = (tmp_path / "case-moe-small-experts.report.md").read_text()
    assert f"# Decision: {decision.remedy.action}" in report
    assert f"{decision.remedy.predicted_speedup:.3f}x" in report and f"{decision.gain.speedup:.3f}x" in report
    assert decision.undo and all(u.revert_if in report for u in decision.undo)
    assert "- [client-gap] confirmed: receipt gaps match" in report
    assert "## Causes, ranked by evidence grade, then bounded gain" in report  # the ordinary report follows


def test_pin_errors_show_under_their_fields_and_change_nothing(tmp_path):
    async def scenario():
        app = make_app(example_copy(tmp_path), start="pin")
        async with app.run_test(size=(80, 24)) as pilot:
            before = app.workspace.session
            await type_into(pilot, field(app.screen, "batch"), "0")
            await type_into(pilot, field(app.screen, "layout.tp"), "two")
            await pilot.press("ctrl+s")
            await pilot.pause()
            shown = {f.spec.key: str(f.query_one(".field-error").render()) for f in app.screen.query("FormField") if f.has_class("-invalid")}
            assert set(shown) == {"batch", "layout.tp"}
            assert "greater than or equal to 1" in shown["batch"]
            assert app.workspace.session == before and app.workspace.revision == 0  # refused whole, not saved

    run(scenario())


def test_the_palette_offers_the_current_screens_commands(tmp_path):
    async def scenario():
        app = make_app(example_copy(tmp_path), start="hypotheses")
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            titles = [c.title for c in app.get_system_commands(app.screen)]
            top = app.workspace.diagnosis.hypotheses[0]
            assert titles[:2] == [f"Confirmed: {top.check.confirms}", f"Refuted: {top.check.refutes}"]
            assert f"Decide: {top.remedies[0].action}" in titles and "Go to Interview" in titles
            await pilot.press("4")
            await pilot.pause()
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert titles[0] == f"Ask: {app.workspace.diagnosis.questions[0].label}"
            assert not any(t.startswith("Confirmed:") for t in titles)
            await pilot.press("ctrl+p")
            await pilot.pause()
            assert type(app.screen).__name__ == "CommandPalette"
            await pilot.press("escape", "escape", "f1")
            await pilot.pause()
            assert type(app.screen).__name__ == "HelpScreen"

    run(scenario())
