"""A probe report from another device never speaks for the case: a CPU-only report loaded into an H100 case.

The report (tests/data/probe_reports/cpu-only.json, a real ``diagnoser probe --json`` run on a
machine without a GPU) carries host-memory bandwidth and gloo collectives; merged, they would
pass for the H100's figures. Loaded on the Evidence screen, they are kept out with a warning that
stays in the status line and in the session's record of where evidence came from.
"""

from __future__ import annotations

from conftest import REPO
from tui_support import example_copy, make_app, run, shown_text

from diagnoser.models.case import load_case
from diagnoser.models.probe_report import load_report
from diagnoser.probe_fit import CPU, fit_report, measured_on

CPU_REPORT = REPO / "tests" / "data" / "probe_reports" / "cpu-only.json"


def test_a_cpu_probe_report_is_kept_out_of_a_gpu_case(tmp_path):
    case = example_copy(tmp_path)

    async def load():
        app = make_app(case, start="evidence")
        async with app.run_test(size=(100, 30)) as pilot:
            ws = app.workspace
            before = ws.session.case.observations
            app.screen.query_one("#evidence-path").value = str(CPU_REPORT)
            await pilot.press("ctrl+r")
            await pilot.pause()
            status = shown_text(app.screen.query_one("#job-status"))
            after = ws.session.case.observations
            assert after.probe == before.probe and after.collectives == before.collectives
            assert "kept out" in status and "H100" in status and "CPU" in status
            assert "kept out" in ws.session.sources[-1].label
            assert not any("transfer" in h.id or "collective" in h.id for h in ws.diagnosis.hypotheses)

    run(load())


def test_collectives_mean_nothing_on_one_rank():
    """Without a pinned GPU to compare against, a single-rank layout still refuses collective timings."""
    report = load_report(CPU_REPORT)
    assert measured_on(report) == CPU
    case = load_case(REPO / "examples" / "case-moe-small-experts.yaml")
    unpinned = case.model_copy(update={"workload": case.workload.model_copy(update={"hardware": None})})
    kept, warnings = fit_report(unpinned, report)
    assert [r.name for r in kept.results if r.name == "collectives"] == []
    assert "bandwidth" in [r.name for r in kept.results]
    assert warnings == ["collective timings kept out: the case runs on one rank (TP=EP=PP=DP=1), so its step has no collectives"]
    multi = unpinned.model_copy(update={"workload": unpinned.workload.model_copy(update={"layout": unpinned.workload.layout.model_copy(update={"tp": 2})})})
    assert fit_report(multi, report) == (report, [])
