"""Evidence jobs: a real trace analysis in its child process, watched by a worker that reports
progress while the interface keeps handling keys, and cancelled from the keyboard.

The job's events pass through a gate the test holds, so "a key pressed while the analysis
runs" is a fact of the test's own making, not a race against the machine's speed.
"""

from __future__ import annotations

import threading

from conftest import REPO
from tui_support import example_copy, make_app, run

from diagnoser.tui.jobs import Jobs, Progress, TraceJob
from diagnoser.tui.screens.dialogs import HelpScreen

TRACES = REPO / "tests" / "data" / "trace" / "synthetic"


class GatedJobs(Jobs):
    """Real trace jobs whose events stop after the first completed stage until ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.job: TraceJob | None = None

    def traces(self, paths):
        job = self.job = TraceJob(paths)
        gate = self.gate

        class Gated:
            def events(self):
                for event in job.events():
                    yield event
                    if isinstance(event, Progress) and event.done == 1:
                        gate.wait(timeout=30)

            def cancel(self):
                job.cancel()

        return Gated()


async def _start_analysis(app, pilot):
    await pilot.press("3", "p")
    app.screen.query_one("#evidence-path").value = str(TRACES)  # a long path: set, not typed
    await pilot.press("ctrl+t")
    bar = app.screen.query_one("#job-progress")
    for _ in range(600):  # until the child has read the traces (bounded, not timed)
        if bar.progress >= 1:
            break
        await pilot.pause(0.05)
    assert bar.total == 3 and bar.progress == 1
    return bar


def test_traces_analyzed_in_the_worker_while_keys_are_handled(tmp_path):
    jobs = GatedJobs()

    async def scenario():
        app = make_app(example_copy(tmp_path), jobs=jobs, start="bound")
        async with app.run_test(size=(100, 30)) as pilot:
            await _start_analysis(app, pilot)
            evidence = app.screen
            assert "finding steps on 2 rank(s)" in str(evidence.query_one("#job-status").render())
            await pilot.press("f1")  # during the analysis; focus is still in the path field
            await pilot.pause()
            assert isinstance(app.screen, HelpScreen) and evidence.job is not None
            await pilot.press("escape")
            jobs.gate.set()
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert evidence.job is None
            return app.workspace.session

    try:
        session = run(scenario())
    finally:
        jobs.gate.set()
    budget = session.case.observations.budget
    assert budget.source.startswith("diagnoser analyze") and budget.rank == 0
    assert session.sources[-1].kind.value == "traces" and "observations.budget" in session.sources[-1].sections


def test_escape_cancels_a_running_analysis(tmp_path):
    jobs = GatedJobs()

    async def scenario():
        app = make_app(example_copy(tmp_path), jobs=jobs, start="bound")
        async with app.run_test(size=(100, 30)) as pilot:
            before = app.workspace.session
            await _start_analysis(app, pilot)
            await pilot.press("escape")
            jobs.gate.set()
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert "cancelled" in str(app.screen.query_one("#job-status").render())
            assert app.workspace.session == before  # nothing merged
            assert jobs.job._proc.poll() is not None  # the child is gone

    try:
        run(scenario())
    finally:
        jobs.gate.set()


def test_client_probe_runs_from_the_evidence_screen(tmp_path):
    from streaming_server import DecodeConfig, StreamingServer

    async def scenario(url):
        app = make_app(example_copy(tmp_path), start="evidence")
        async with app.run_test(size=(100, 30)) as pilot:
            app.screen.query_one("#evidence-endpoint").value = url
            await pilot.press("ctrl+n")
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert "merged" in str(app.screen.query_one("#job-status").render())
            return app.workspace.session

    with StreamingServer(DecodeConfig(step_ms=2.0, server_timing=True)) as url:
        session = run(scenario(url))
    source = session.sources[-1]
    assert source.kind.value == "probes" and source.label == f"client probe {url}"
    assert "observations.boundaries" in source.sections
    assert session.case.observations.boundaries.client_receipt_ms is not None
