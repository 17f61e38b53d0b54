"""The decision export asks where the report goes, writes there, says the folder, and never
writes over the files the session was opened from."""

from __future__ import annotations

from tui_support import example_copy, make_app, run


def export_to(case, target: str | None, confirm: bool = True):
    """Press h on the Decision screen, set the offered path to ``target`` (None: keep it), then
    enter (or escape); the screen left showing and its export status come back."""

    async def walk():
        app = make_app(case, start="decision")
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            await pilot.press("h")
            await pilot.pause()
            assert type(app.screen).__name__ == "ExportScreen"
            if target is not None:
                app.screen.query_one("#export-path").value = target
            await pilot.press("enter" if confirm else "escape")
            await pilot.pause()
            return type(app.screen).__name__, str(app.screen.query_one("#export-status").render())

    return run(walk())


def test_the_report_goes_where_the_user_says_and_the_status_names_the_folder(tmp_path):
    case = example_copy(tmp_path)
    target = tmp_path / "reports" / "today.html"
    _, status = export_to(case, str(target))
    assert status == f"wrote today.html in {target.parent}"
    assert "<html" in target.read_text().lower()
    assert not (tmp_path / "case-moe-small-experts.report.html").exists()


def test_the_case_it_was_opened_from_is_never_overwritten(tmp_path):
    case = example_copy(tmp_path)
    before = case.read_bytes()
    _, status = export_to(case, str(case))
    assert "is an input of this command; inputs are never overwritten" in status
    assert case.read_bytes() == before


def test_escape_writes_nothing(tmp_path):
    case = example_copy(tmp_path)
    assert export_to(case, None, confirm=False) == ("DecisionScreen", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case-moe-small-experts.yaml"]
