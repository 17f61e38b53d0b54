"""A guided session's export never contradicts itself: the verdict follows the marks and the decision.

Driven by keys through Pilot: the leading cause is marked refuted, a remedy of another cause is
chosen, and the Markdown and HTML exports are read back from disk.
"""

from __future__ import annotations

from tui_support import example_copy, make_app, run

from diagnoser.models.session import Answer, Mark
from diagnoser.session_ops import apply_answer


def test_a_refuted_cause_is_not_the_exported_verdict(tmp_path):
    case = example_copy(tmp_path)

    async def walk():
        app = make_app(case, start="hypotheses")
        async with app.run_test(size=(100, 30)) as pilot:
            ws = app.workspace
            answer = Answer(input="boundaries", value={"device_step_ms": 16, "client_receipt_ms": 30})
            app.commit(ws.session.model_copy(update={"case": apply_answer(ws.session.case, answer), "answers": [answer]}))
            await pilot.pause()
            top = app.screen.selected.id
            await pilot.press("r")
            await pilot.pause()
            assert ws.session.marks[top].status is Mark.refuted
            await pilot.press("7")
            await pilot.pause()
            await pilot.press("enter")
            await pilot.pause()
            assert ws.session.decision is not None and ws.session.decision.hypothesis != top
            for key in ("m", "h"):  # each export asks where; enter takes the offered path beside the session
                await pilot.press(key)
                await pilot.pause()
                await pilot.press("enter")
                await pilot.pause()
            return top, ws.session.decision

    refuted, decision = run(walk())
    md = (tmp_path / "case-moe-small-experts.report.md").read_text()
    html = (tmp_path / "case-moe-small-experts.report.html").read_text()
    for report in (md, html):
        verdict = next(line for line in report.splitlines() if "Verdict:" in line)
        assert f"leading cause {refuted}" not in verdict
        assert f"refuted by its check: {refuted}" in verdict
        assert f"decided: {decision.remedy.action} (for {decision.hypothesis})" in verdict.replace("&#x27;", "'")
        assert "{'" not in report and "device_step_ms 16 ms, client_receipt_ms 30 ms" in report
    assert f"[{refuted}]" in md and f"- [{refuted}] refuted" in md
    assert f"[{refuted}] " in md and "marked refuted by the engineer" in md
    assert 'class="cause marked-refuted"' in html


def test_markdown_keeps_confirms_and_refutes_under_their_check(tmp_path):
    from diagnoser.engine import diagnose, load_rulebook
    from diagnoser.models.case import load_case
    from diagnoser.report import render_markdown

    from conftest import REPO

    text = render_markdown(diagnose(load_case(REPO / "examples" / "case-moe-small-experts.yaml"), load_rulebook(())))
    lines = text.splitlines()
    check = next(i for i, line in enumerate(lines) if line.startswith("- check: "))
    assert lines[check + 1].startswith("  - confirms: ") and lines[check + 2].startswith("  - refutes: ")
