"""Modal dialogs: the help screen, a note editor, the choice of a remedy, and where an export goes."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Markdown, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from diagnoser.models.hypothesis import Hypothesis
from diagnoser.report.figures import ms

HELP = """\
# diagnoser: the guided session

Work down the stages; every change is saved to the session file at once.

| key | stage | what you do there |
|---|---|---|
| 1 | Pin | model, GPU, precision, context, batch, layout, boundary, observed figures (ctrl+s applies) |
| 2 | Bound | per-rank bytes, floors, the ceiling beside the observed rate, what the bound leaves out |
| 3 | Evidence | load a case, a probe report or traces; run probes or the client probe; the step budget |
| 4 | Interview | the next questions, one at a time: answer (ctrl+s), next (ctrl+n), back (ctrl+b) |
| 5 | Hypotheses | mark confirmed (c), refuted (r), needs data (n), clear (u); note (e); choose a remedy (d) |
| 6 | What-if | Amdahl, speculation and batching, prefilled from the case |
| 7 | Decision | the chosen remedy and its undo criteria; export Markdown (m), HTML (h), JSON (j) to a path you confirm |
| 8 | Walkthrough | a scored training walkthrough: enter answers, ctrl+n skips or goes on, ctrl+f finishes |

Anywhere: **ctrl+p** opens the command palette (its commands follow the screen you are on),
**?** this help, **escape** leaves a text field (then the digit keys move between stages),
**tab** moves between fields, **ctrl+q** quits.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="help", classes="dialog"):
            yield Markdown(HELP)
            yield Static("escape closes", classes="dialog-hint")


class NoteScreen(ModalScreen[str | None]):
    """Edit one note; ctrl+s keeps it, escape drops the edit."""

    BINDINGS = [Binding("ctrl+s", "keep", "Keep note", priority=True), Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text = title
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            yield TextArea(self.text, id="note-text", soft_wrap=True)
            yield Static("ctrl+s keeps the note, escape cancels", classes="dialog-hint")

    def action_keep(self) -> None:
        self.dismiss(self.query_one("#note-text", TextArea).text.strip())


class RemedyScreen(ModalScreen[int | None]):
    """Pick one of a hypothesis's remedies; its index comes back."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, hypothesis: Hypothesis) -> None:
        super().__init__()
        self.hypothesis = hypothesis

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(f"Remedy for {self.hypothesis.id}", classes="dialog-title")
            yield OptionList(*(Option(remedy_label(r), id=str(i)) for i, r in enumerate(self.hypothesis.remedies)), id="remedies")
            yield Static("enter chooses, escape cancels", classes="dialog-hint")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id))


class ExportScreen(ModalScreen[str | None]):
    """Where the report goes: the default beside the session file, shown in full and editable,
    so nobody learns afterwards that it landed inside a repository."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str, default: str) -> None:
        super().__init__()
        self.title_text = title
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text, classes="dialog-title")
            yield Input(self.default, id="export-path")
            yield Static("enter writes the file there (folders are made), escape cancels", classes="dialog-hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)


def export_message(path) -> str:
    return f"wrote {path.name} in {path.parent}"


def remedy_label(remedy) -> str:
    predicted = f" -> {ms(remedy.predicted_step_ms)}, {remedy.predicted_speedup:.3f}x" if remedy.predicted_speedup else ""
    return f"{remedy.action}{predicted} (cost: {remedy.cost}; risk: {remedy.risk})"
