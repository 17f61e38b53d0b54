"""What every stage screen has: the header, the stage sidebar, the footer, and a view it
redraws from the workspace whenever the session has changed since it last looked."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Container, Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Header

from diagnoser.tui.widgets import Sidebar
from diagnoser.tui.workspace import Workspace


class StageScreen(Screen):
    STAGE = ""
    BINDINGS = [Binding("escape", "leave_field", "Sidebar")]

    def __init__(self) -> None:
        super().__init__(id=f"stage-{self.STAGE}")
        self.seen_revision = -1

    @property
    def workspace(self) -> Workspace:
        return self.app.workspace

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield Sidebar(self.STAGE)
            with Container(id="body"):
                yield from self.compose_body()
        yield Footer()

    def compose_body(self) -> ComposeResult:
        raise NotImplementedError

    def show(self) -> None:
        """Redraw from the workspace."""
        raise NotImplementedError

    def commands(self) -> Iterable[SystemCommand]:
        """Palette commands that belong to this screen's current state."""
        return ()

    def on_mount(self) -> None:
        self.refresh_if_stale()

    def on_screen_resume(self) -> None:
        self.refresh_if_stale()

    def refresh_if_stale(self) -> None:
        if self.seen_revision != self.workspace.revision:
            self.seen_revision = self.workspace.revision
            self.show()

    def on_sidebar_go(self, message: Sidebar.Go) -> None:
        self.app.go(message.stage)

    def action_leave_field(self) -> None:
        self.query_one(Sidebar).focus()
