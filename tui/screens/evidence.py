"""Evidence: bring in a case, a probe report, traces or fresh probe runs, and see what the case holds.

Trace analysis and probes run as jobs in child processes (``diagnoser.tui.jobs``), watched by a
thread worker that forwards their progress; the interface stays live and Escape cancels.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, DataTable, Input, ProgressBar, Static

from diagnoser.engine.facts import present_inputs
from diagnoser.errors import InputError
from diagnoser.models.case import Case, load_case
from diagnoser.models.session import Source, SourceKind
from diagnoser.probe_fit import fit_report
from diagnoser.report.figures import ms
from diagnoser.session_ops import (
    answer_section,
    load_probe_report,
    merge_probe_report,
    merge_case,
    merge_sections,
    section_sources,
    with_source,
)
from diagnoser.tui.jobs import Failed, Finished, Job, Progress
from diagnoser.tui.screens.base import StageScreen
from diagnoser.tui.widgets import Waterfall
from diagnoser.whatif_inputs import budget_parts
from diagnoser.report.untrusted import markup_safe

PROBES_HERE = ["device", "bandwidth", "gemm", "graphs", "collectives"]
CLIENT_PROBES = ["client"]


class EvidenceScreen(StageScreen):
    STAGE = "evidence"
    AUTO_FOCUS = "#do-load_case"
    BINDINGS = [
        Binding("ctrl+o", "load_case", "Case", priority=True),
        Binding("ctrl+r", "load_report", "Report", priority=True),
        Binding("ctrl+t", "traces", "Traces", priority=True),
        Binding("ctrl+g", "probes", "Probes", priority=True),
        Binding("ctrl+n", "client", "Client", priority=True),
        Binding("p", "focus_path", "Path"),
        Binding("escape", "cancel_or_leave", "Cancel", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.job: Job | None = None

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="evidence-view"):
            yield Input(placeholder="path: a case, a probe report, or traces (file or folder)", id="evidence-path", compact=True)
            with Horizontal(classes="field-row"):
                yield Input(placeholder="endpoint URL (client probe)", id="evidence-endpoint", compact=True)
                yield Input(placeholder="model name", id="evidence-model", compact=True)
            with Horizontal(classes="buttons"):
                for label, action in (("Case ^o", "load_case"), ("Report ^r", "load_report"), ("Traces ^t", "traces"),
                                      ("Probes ^g", "probes"), ("Client ^n", "client")):
                    yield Button(label, id=f"do-{action}", compact=True)
            with Horizontal(id="job", classes="field-row"):
                yield ProgressBar(id="job-progress", show_eta=False)
                yield Button("Cancel (esc)", id="do-cancel", compact=True, disabled=True)
            yield Static("", id="job-status")
            yield DataTable(id="observations", cursor_type="row", zebra_stripes=True)
            yield Waterfall(id="waterfall")
            yield Static("", id="sources")

    def on_mount(self) -> None:
        table = self.query_one("#observations", DataTable)
        table.add_columns("section", "from", "fields given")
        self.query_one("#job").display = False
        super().on_mount()

    def show(self) -> None:
        w = self.workspace
        case = w.session.case
        table = self.query_one("#observations", DataTable)
        table.clear()
        present = present_inputs(case, w.diagnosis.bound)
        sources = section_sources(w.session)
        sections = sorted(name for name in present if "." not in name)
        for name in sections:
            fields = sorted(p.partition(".")[2] for p in present if p.startswith(name + "."))
            origin = sources.get(answer_section(name)) if name != "bound" else sources.get("workload")
            table.add_row(name, markup_safe(origin.label) if origin else "the case", markup_safe(", ".join(fields)) or "-")
        budget = case.observations.budget
        waterfall = self.query_one("#waterfall", Waterfall)
        waterfall.display = budget is not None
        if budget is not None:
            title = f"step budget, rank {budget.rank if budget.rank is not None else '?'}: {ms(budget.step_ms)} ({budget.source or 'no source given'})"
            waterfall.show(title, [(part, part_ms, ms(part_ms)) for part, part_ms in budget_parts(budget).items()])
        lines = [f"{s.kind.value}: {s.label}" + (f" -> {', '.join(s.sections)}" if s.sections else "") for s in w.session.sources]
        self.query_one("#sources", Static).update(Text("what came from where\n", style="bold") + Text("\n".join(lines) or "nothing loaded yet"))

    def commands(self):
        for label, action in (("Load a case file's sections", "load_case"), ("Load probe report", "load_report"), ("Analyze traces", "traces"),
                              ("Run probes on this machine", "probes"), ("Client probe against the endpoint", "client")):
            yield SystemCommand(label, "from the path (or endpoint) typed on the Evidence screen", getattr(self, f"action_{action}"))
        if self.job is not None:
            yield SystemCommand("Cancel the running job", "stop the analysis or probes now", self.action_cancel)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        action = (event.button.id or "").removeprefix("do-")
        getattr(self, f"action_{action}")()

    def _path(self) -> str | None:
        text = self.query_one("#evidence-path", Input).value.strip()
        if not text:
            self._status("type a path first", error=True)
            return None
        return text

    def _status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#job-status", Static)
        status.update(Text(text, style="bold red" if error else ""))
        status.display = True

    def _commit(self, source: Source, warnings: list[str] = (), **changes) -> bool:
        try:
            self.app.commit(with_source(self.workspace.session, source, **changes))
        except InputError as err:
            self._status(str(err), error=True)
            return False
        merged = Text(f"{source.kind.value}: {source.label} merged ({', '.join(source.sections) or 'nothing new'})")
        for warning in warnings:
            merged.append(f"\nwarning: {warning}", style="bold yellow")
            self.notify(markup_safe(warning), title="probe results kept out", severity="warning", timeout=10)
        self.query_one("#job-status", Static).update(merged)
        return True

    def _merge_reports(self, reports) -> tuple[Case, list[str], list[str]]:
        """The case with what each report may say about it merged, the sections set, and what was kept out."""
        case, sections, warnings = self.workspace.session.case, [], []
        for report in reports:
            fitting, kept_out = fit_report(case, report)
            case, merged = merge_probe_report(case, fitting)
            sections += merged
            warnings += [w for w in kept_out if w not in warnings]
        return case, sorted(set(sections)), warnings

    def _merge_file(self, kind: SourceKind, merge) -> None:
        if (path := self._path()) is None:
            return
        try:
            case, sections = merge(self.workspace.session.case, path)
        except InputError as err:
            self._status(str(err), error=True)
            return
        self._commit(Source(kind=kind, label=Path(path).name, sections=sections), case=case)

    def action_load_case(self) -> None:
        self._merge_file(SourceKind.case, lambda case, path: merge_case(case, load_case(path)))

    def action_load_report(self) -> None:
        if (path := self._path()) is None:
            return
        try:
            case, sections, warnings = self._merge_reports([load_probe_report(path)])
        except InputError as err:
            self._status(str(err), error=True)
            return
        self._commit(Source(kind=SourceKind.probe_report, label=_label(Path(path).name, warnings), sections=sections), warnings, case=case)

    def action_traces(self) -> None:
        if (path := self._path()) is not None:
            self._start(lambda: self.app.jobs.traces([path]), SourceKind.traces, Path(path).name)

    def action_probes(self) -> None:
        case = self.workspace.session.case.model_dump_json()
        self._start(lambda: self.app.jobs.probes(case, PROBES_HERE), SourceKind.probes, "diagnoser probe")

    def action_client(self) -> None:
        endpoint = self.query_one("#evidence-endpoint", Input).value.strip()
        if not endpoint:
            self._status("type the endpoint URL first (e.g. http://127.0.0.1:8000)", error=True)
            return
        model = self.query_one("#evidence-model", Input).value.strip() or None
        case = self.workspace.session.case.model_dump_json()
        self._start(lambda: self.app.jobs.probes(case, CLIENT_PROBES, endpoint, model), SourceKind.probes, f"client probe {endpoint}")

    def _start(self, make_job, kind: SourceKind, label: str) -> None:
        """Start one job at a time; its events are watched by a thread worker."""
        if self.job is not None:
            self._status("a job is already running: cancel it first (esc)", error=True)
            return
        self.job = make_job()
        self.query_one("#job").display = True
        self.query_one("#do-cancel", Button).disabled = False
        self.query_one("#job-progress", ProgressBar).update(total=None, progress=0)
        self._status(f"{kind.value}: starting")
        self._watch(self.job, kind, label)

    @work(thread=True, exclusive=True, group="evidence")
    def _watch(self, job: Job, kind: SourceKind, label: str) -> None:
        for event in job.events():
            self.app.call_from_thread(self._on_event, event, kind, label)

    def _on_event(self, event, kind: SourceKind, label: str) -> None:
        bar = self.query_one("#job-progress", ProgressBar)
        if isinstance(event, Progress):
            bar.update(total=event.total, progress=event.done)
            self._status(f"{kind.value}: {event.text}")
            return
        self.job = None
        self.query_one("#do-cancel", Button).disabled = True
        if isinstance(event, Failed):
            self._status(f"{kind.value}: {event.message}", error=True)
            return
        bar.update(progress=bar.total or 1, total=bar.total or 1)
        self._finish(event, kind, label)

    def _finish(self, event: Finished, kind: SourceKind, label: str) -> None:
        warnings: list[str] = []
        try:
            if kind is SourceKind.traces:
                case, names = merge_sections(self.workspace.session.case, event.result)
                sections = [f"observations.{name}" for name in names]
            else:
                case, sections, warnings = self._merge_reports(event.result)
        except InputError as err:
            self._status(str(err), error=True)
            return
        self._commit(Source(kind=kind, label=_label(label, warnings), sections=sorted(set(sections))), warnings, case=case)

    def action_focus_path(self) -> None:
        self.query_one("#evidence-path", Input).focus()

    def action_cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def action_cancel_or_leave(self) -> None:
        if self.job is not None:
            self.action_cancel()
        else:
            self.action_leave_field()

    def on_unmount(self) -> None:
        self.action_cancel()


def _label(label: str, warnings: list[str]) -> str:
    """A source's label, saying when some of its results were kept out (the session keeps the reason visible)."""
    return f"{label} (some results kept out: {'; '.join(warnings)})" if warnings else label
