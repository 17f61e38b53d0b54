"""Hypotheses: the ranked list with grade and bounded gain, and everything one of them carries.

Marks and notes are the engineer's, kept in the session; a refuted hypothesis stays in the
list, struck through, so the reasoning that set it aside stays visible.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Container, VerticalScroll
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from diagnoser.errors import InputError
from diagnoser.models.hypothesis import Hypothesis
from diagnoser.models.session import HypothesisMark, Mark
from diagnoser.report.diagnosis import evidence_text, gain_text, sections
from diagnoser.session_ops import decide
from diagnoser.tui.screens.base import StageScreen
from diagnoser.tui.screens.dialogs import NoteScreen, RemedyScreen, remedy_label
from diagnoser.report.untrusted import markup_safe

MARK_SIGNS = {Mark.confirmed: "✓", Mark.refuted: "✗", Mark.needs_data: "?", None: " "}


class HypothesesScreen(StageScreen):
    STAGE = "hypotheses"
    AUTO_FOCUS = "#hyp-list"
    BINDINGS = [
        Binding("c", "mark('confirmed')", "Confirmed"),
        Binding("r", "mark('refuted')", "Refuted"),
        Binding("n", "mark('needs_data')", "Needs data"),
        Binding("u", "mark('')", "Clear", show=False),
        Binding("e", "note", "Note"),
        Binding("d", "decide", "Decide"),
    ]

    def compose_body(self) -> ComposeResult:
        with Container(id="hyp-split"):
            yield OptionList(id="hyp-list")
            with VerticalScroll(id="hyp-detail"):
                yield Static("", id="hyp-text")

    def show(self) -> None:
        listing = self.query_one("#hyp-list", OptionList)
        keep = listing.highlighted_option.id if listing.highlighted_option is not None else None
        listing.clear_options()
        options: list[Option | None] = []
        for _, heading, items in sections(self.workspace.diagnosis):
            options.append(Option(Text(heading, style="bold underline"), disabled=True))
            options += [Option(self._label(i, h), id=h.id) for i, h in enumerate(items, 1)]
        listing.add_options(options)
        ids = [o.id for o in options if o is not None and o.id]
        if ids:
            listing.highlighted = listing.get_option_index(keep if keep in ids else ids[0])
        self._show_detail()

    def _label(self, index: int, h: Hypothesis) -> Text:
        mark = self.workspace.session.marks.get(h.id, HypothesisMark())
        refuted = mark.status is Mark.refuted
        label = Text(f"{MARK_SIGNS[mark.status]} {index}. {h.id}", style="strike dim" if refuted else "")
        if h.grade:
            label.append(f"  {h.grade.value}", style="strike dim" if refuted else "italic")
        if h.gain is not None:
            label.append(f"  ≤{h.gain.speedup:.3g}x", style="strike dim" if refuted else "bold")
        return label

    @property
    def selected(self) -> Hypothesis | None:
        option = self.query_one("#hyp-list", OptionList).highlighted_option
        if option is None or not option.id:
            return None
        return next((h for h in self.workspace.diagnosis.hypotheses if h.id == option.id), None)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_list.id == "hyp-list":
            self._show_detail()

    def _show_detail(self) -> None:
        h = self.selected
        self.query_one("#hyp-text", Static).update(detail_text(h, self.workspace.session.marks.get(h.id)) if h else "no hypothesis yet")

    def _set_mark(self, h: Hypothesis, **changes) -> None:
        session = self.workspace.session
        mark = session.marks.get(h.id, HypothesisMark()).model_copy(update=changes)
        self.app.save(session.model_copy(update={"marks": {**session.marks, h.id: mark}}))

    def action_mark(self, status: str) -> None:
        if (h := self.selected) is not None:
            self._set_mark(h, status=Mark(status) if status else None)

    def action_note(self) -> None:
        h = self.selected
        if h is None:
            return
        mark = self.workspace.session.marks.get(h.id, HypothesisMark())

        def keep(text: str | None) -> None:
            if text is not None:
                self._set_mark(h, note=text)

        self.app.push_screen(NoteScreen(f"Note on {h.id}", mark.note), keep)

    def action_decide(self) -> None:
        h = self.selected
        if h is None or not h.remedies:
            self.notify("this hypothesis proposes no remedy", severity="warning")
            return
        self.app.push_screen(RemedyScreen(h), lambda index: index is not None and self.choose(h, index))

    def choose(self, h: Hypothesis, index: int) -> None:
        try:
            decision = decide(self.workspace.diagnosis, h.id, index)
        except InputError as err:
            self.notify(markup_safe(err), severity="error")
            return
        if self.app.save(self.workspace.session.model_copy(update={"decision": decision})):
            self.app.go("decision")

    def commands(self):
        h = self.selected
        if h is None:
            return
        if h.check is not None:
            yield SystemCommand(f"Confirmed: {h.check.confirms}", f"mark {h.id} confirmed (check: {h.check.measure})",
                                lambda: self._set_mark(h, status=Mark.confirmed))
            yield SystemCommand(f"Refuted: {h.check.refutes}", f"mark {h.id} refuted", lambda: self._set_mark(h, status=Mark.refuted))
        yield SystemCommand(f"Needs data: {h.id}", "the check could not be run yet", lambda: self._set_mark(h, status=Mark.needs_data))
        yield SystemCommand(f"Note on {h.id}", "write what was run and what it showed", self.action_note)
        for i, remedy in enumerate(h.remedies):
            yield SystemCommand(f"Decide: {remedy.action}", remedy_label(remedy), lambda i=i: self.choose(h, i))


def detail_text(h: Hypothesis, mark: HypothesisMark | None) -> Text:
    text = Text()
    text.append(f"{h.title}\n", style="bold")
    text.append(f"{h.id} · {h.kind.value}" + (f" · {h.grade.value}" if h.grade else "") + (f" · refines {h.parent}" if h.parent else "") + "\n")
    if mark is not None and (mark.status or mark.note):
        text.append("marked: ", style="bold")
        text.append(f"{mark.status.value if mark.status else 'open'}" + (f": {mark.note}" if mark.note else "") + "\n")
    gain = gain_text(h)
    if gain:
        text.append("gain: ", style="bold")
        text.append(gain + "\n")
    text.append(h.explanation + "\n")
    if h.evidence:
        text.append("evidence: ", style="bold")
        text.append(evidence_text(h) + "\n")
    if h.check is not None:
        text.append("check: ", style="bold")
        text.append(h.check.measure + "\n")
        text.append("  confirms: ", style="green")
        text.append(h.check.confirms + "\n")
        text.append("  refutes: ", style="red")
        text.append(h.check.refutes + "\n")
    for i, r in enumerate(h.remedies, 1):
        text.append(f"remedy {i}: ", style="bold")
        text.append(remedy_label(r) + "\n")
    for u in h.undo:
        text.append(f"undo if {u.metric.value}: ", style="bold")
        text.append(u.revert_if + "\n")
    return text
