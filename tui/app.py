"""The guided session's application: seven stage screens around one workspace, and the walkthroughs.

The app owns the workspace (session, diagnosis, bound) and the jobs it may start; screens
ask it to ``commit`` a new session, which re-runs the engine when the case changed and saves
the session at once. Each stage is a mode, so each keeps its own state while the engineer
moves between them; the command palette offers the current screen's commands first.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from diagnoser.errors import InputError
from diagnoser.models.session import Session
from diagnoser.tui.jobs import Jobs
from diagnoser.tui.screens.bound import BoundScreen
from diagnoser.tui.screens.decision import DecisionScreen
from diagnoser.tui.screens.dialogs import ExportScreen, HelpScreen, export_message
from diagnoser.tui.screens.evidence import EvidenceScreen
from diagnoser.tui.screens.hypotheses import HypothesesScreen
from diagnoser.tui.screens.interview import InterviewScreen
from diagnoser.tui.screens.pin import PinScreen
from diagnoser.tui.screens.walkthrough import WalkthroughScreen
from diagnoser.tui.screens.whatif import WhatIfScreen
from diagnoser.tui.widgets import STAGES
from diagnoser.tui.workspace import Workspace
from diagnoser.walkthroughs.prepare import Prepared
from diagnoser.report.untrusted import markup_safe

SCREENS = {
    "pin": PinScreen,
    "bound": BoundScreen,
    "evidence": EvidenceScreen,
    "interview": InterviewScreen,
    "hypotheses": HypothesesScreen,
    "whatif": WhatIfScreen,
    "decision": DecisionScreen,
    "walkthrough": WalkthroughScreen,
}
EXPORT_SUFFIX = {"markdown": ".report.md", "html": ".report.html", "json": ".report.json"}


class DiagnoserApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "diagnoser"
    MODES = SCREENS
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    BINDINGS = [
        *(Binding(str(i), f"go('{stage}')", title, show=False) for i, (stage, title) in enumerate(STAGES, 1)),
        Binding("question_mark,f1", "help", "Help"),
        Binding("q", "quit", "Quit", show=False),
    ]

    def __init__(self, workspace: Workspace, start: str = "pin", jobs: Jobs | None = None, walkthrough: str | None = None) -> None:
        super().__init__()
        self.workspace = workspace
        self.start = start
        self.jobs = jobs or Jobs()
        self.walkthrough = walkthrough
        self._walkthroughs: dict[str, Prepared] | None = None

    async def on_mount(self) -> None:
        self._subtitle()
        if self.walkthrough is not None:
            await self.open_walkthrough(self.walkthrough)
        else:
            self.switch_mode(self.start)

    def _subtitle(self) -> None:
        self.sub_title = f"session {self.workspace.path.name}" if self.workspace.path else "session not saved"

    def go(self, stage: str) -> None:
        self.switch_mode(stage)

    def action_go(self, stage: str) -> None:
        self.go(stage)

    def walkthroughs(self) -> dict[str, Prepared]:
        """The catalogue ``diagnoser walkthrough`` lists (bundled and installed packs), prepared on first use
        rather than at start-up; raises InputError when a pack is broken."""
        if self._walkthroughs is None:
            from diagnoser.walkthroughs import load_catalogue

            self._walkthroughs = load_catalogue(book=self.workspace.rulebook)
        return self._walkthroughs

    async def open_walkthrough(self, name: str) -> None:
        await self.switch_mode("walkthrough")
        self.screen.begin(name)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def commit(self, session: Session) -> None:
        """Adopt a new session (raises InputError, changing nothing, when the engine rejects it)."""
        self.workspace.update(session)
        if hasattr(self.screen, "refresh_if_stale"):
            self.screen.refresh_if_stale()

    def save(self, session: Session) -> bool:
        """``commit`` for changes that have no form to show an error in: a failure is notified."""
        try:
            self.commit(session)
        except InputError as err:
            self.notify(markup_safe(err), severity="error")
            return False
        return True

    def export_path(self, fmt: str) -> Path:
        """Where an export goes unless the user says otherwise: beside the session file."""
        w = self.workspace
        base = w.path if w.path is not None else Path("diagnoser.session.json")
        return base.with_name(base.name.removesuffix(".json").removesuffix(".session") + EXPORT_SUFFIX[fmt]).absolute()

    def export(self, fmt: str, path: Path | None = None) -> Path:
        """Write the session report (to ``path``, else beside the session file); the path written comes back."""
        from diagnoser.fileio import check_outputs, write_atomic
        from diagnoser.session_report import render_session_html, render_session_json, render_session_markdown

        w = self.workspace
        path = (path or self.export_path(fmt)).expanduser().absolute()
        check_outputs([("export", path)], [*w.inputs, *([w.path] if w.path is not None else [])])
        render = {"markdown": render_session_markdown, "html": render_session_html, "json": render_session_json}[fmt]
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(path, render(w.session, w.diagnosis))

    def ask_export(self, fmt: str, done) -> None:
        """Ask where the report goes, write it, and hand ``done`` the written path or the refusal."""

        def chosen(answer: str | None) -> None:
            if answer is None:
                return
            try:
                done(self.export(fmt, Path(answer)), None)
            except (InputError, OSError) as err:
                done(None, err)

        self.push_screen(ExportScreen(f"Export the report as {fmt}", str(self.export_path(fmt))), chosen)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        if hasattr(screen, "commands"):
            yield from screen.commands()
        for i, (stage, title) in enumerate(STAGES, 1):
            yield SystemCommand(f"Go to {title}", f"stage {i}", lambda stage=stage: self.go(stage))
        try:
            catalogue = self.walkthroughs()
        except InputError:  # the Walkthrough screen says why
            catalogue = {}
        for name, prepared in sorted(catalogue.items()):
            yield SystemCommand(f"Walkthrough: {name}", prepared.doc.title, lambda name=name: self.open_walkthrough(name))
        for fmt, title in (("markdown", "Markdown"), ("html", "HTML"), ("json", "JSON")):
            yield SystemCommand(f"Export report as {title}", "the decision, the marks and the diagnosis", lambda fmt=fmt: self._export_from_palette(fmt))
        yield SystemCommand("Help", "keys and stages", self.action_help)
        yield from super().get_system_commands(screen)

    def _export_from_palette(self, fmt: str) -> None:
        def done(path: Path | None, err: Exception | None) -> None:
            if path is not None:
                self.notify(export_message(path))
            else:
                self.notify(markup_safe(err), severity="error")

        self.ask_export(fmt, done)
