"""Decision and report: the remedy chosen, what it is predicted to buy, what to watch after it.

Candidates are every remedy of every cause not marked refuted, in the diagnosis's order;
exports go through the session renderers, which wrap the ordinary report renderers.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Container, VerticalScroll
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from diagnoser.errors import InputError
from diagnoser.models.hypothesis import Kind
from diagnoser.models.session import Mark
from diagnoser.session_ops import decide
from diagnoser.session_report import prediction_text
from diagnoser.tui.screens.base import StageScreen
from diagnoser.tui.screens.dialogs import NoteScreen, export_message, remedy_label
from diagnoser.report.untrusted import markup_safe

FORMATS = (("markdown", "m", "Markdown"), ("html", "h", "HTML"), ("json", "j", "JSON"))


class DecisionScreen(StageScreen):
    STAGE = "decision"
    AUTO_FOCUS = "#remedy-list"
    BINDINGS = [
        *(Binding(key, f"export('{fmt}')", title) for fmt, key, title in FORMATS),
        Binding("e", "note", "Note"),
    ]

    def compose_body(self) -> ComposeResult:
        with Container(id="decision-split"):
            yield OptionList(id="remedy-list")
            with VerticalScroll(id="decision-detail"):
                yield Static("", id="decision-text")
                yield Static("", id="export-status")

    def show(self) -> None:
        w = self.workspace
        listing = self.query_one("#remedy-list", OptionList)
        listing.clear_options()
        for h in w.diagnosis.of_kind(Kind.cause):
            mark = w.session.marks.get(h.id)
            if mark is not None and mark.status is Mark.refuted:
                continue
            sign = "✓ " if mark is not None and mark.status is Mark.confirmed else ""
            for i, r in enumerate(h.remedies):
                listing.add_option(Option(f"{sign}{h.id}: {remedy_label(r)}", id=f"{h.id}#{i}"))
        if listing.option_count:
            listing.highlighted = 0
        self.query_one("#decision-text", Static).update(decision_text(w.session.decision))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        hid, _, index = (event.option.id or "").rpartition("#")
        try:
            decision = decide(self.workspace.diagnosis, hid, int(index), self.workspace.session.decision.note if self.workspace.session.decision else "")
        except InputError as err:
            self.notify(markup_safe(err), severity="error")
            return
        self.app.save(self.workspace.session.model_copy(update={"decision": decision}))

    def action_export(self, fmt: str) -> None:
        def done(path, err) -> None:
            status = self.query_one("#export-status", Static)
            status.update(Text(export_message(path)) if path is not None else Text(str(err), style="bold red"))

        self.app.ask_export(fmt, done)

    def action_note(self) -> None:
        decision = self.workspace.session.decision
        if decision is None:
            self.notify("choose a remedy first", severity="warning")
            return

        def keep(text: str | None) -> None:
            if text is not None:
                self.app.save(self.workspace.session.model_copy(update={"decision": decision.model_copy(update={"note": text})}))

        self.app.push_screen(NoteScreen("Note on the decision", decision.note), keep)

    def commands(self):
        yield SystemCommand("Note on the decision", "why this remedy, what else was weighed", self.action_note)


def decision_text(decision) -> Text:
    text = Text()
    if decision is None:
        text.append("No decision yet.\n", style="bold")
        text.append("Choose a remedy from the list (enter), or press d on the Hypotheses screen (5).")
        return text
    text.append("Decision: ", style="bold")
    text.append(decision.remedy.action + "\n", style="bold cyan")
    text.append(f"addresses {decision.hypothesis}: {decision.title}\n")
    text.append("predicted gain: ", style="bold")
    text.append(prediction_text(decision) + "\n")
    text.append(f"cost: {decision.remedy.cost}; risk: {decision.remedy.risk}\n")
    if decision.note:
        text.append("note: ", style="bold")
        text.append(decision.note + "\n")
    text.append("watch after the change (undo criteria):\n", style="bold")
    for u in decision.undo:
        text.append(f"  {u.metric.value}: revert if {u.revert_if}\n")
    if not decision.undo:
        text.append("  none given: agree on one before the change\n")
    text.append("export: m Markdown, h HTML, j JSON", style="dim")
    return text
