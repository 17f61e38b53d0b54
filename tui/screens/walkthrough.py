"""Walkthrough: the scored training walkthroughs of ``diagnoser walkthrough``, one step at a time.

A ``WalkthroughRun`` does all of it (reading an answer, the verdict, the score); the screen
only shows its ``StepView``, ``Verdict`` and ``WalkthroughResult`` and feeds it what was typed
or picked. The scenario comes first on its own (at 80x24 it leaves no room for a question),
then each step is asked and then answered, its verdict shown until the trainee goes on, so an
explanation is read before the next question replaces it.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Collapsible, Input, OptionList, Static
from textual.widgets.option_list import Option

from diagnoser.errors import InputError
from diagnoser.walkthroughs import StepView, Verdict, WalkthroughResult, WalkthroughRun, find
from diagnoser.walkthroughs.answers import Unreadable
from diagnoser.walkthroughs.render import ORDER_HINT, outcome_label, paragraphs, unit_hint
from diagnoser.walkthroughs.result import Outcome
from diagnoser.tui.screens.base import StageScreen

OUTCOME_STYLES = {Outcome.correct: "bold green", Outcome.trap: "bold magenta", Outcome.wrong: "bold red"}


class ChoiceList(OptionList):
    """A step's choices: arrows and enter as any list, or the letter shown to jump to one."""

    def on_key(self, event: events.Key) -> None:
        ids = [option.id for option in self.options]
        if event.character in ids:
            event.stop()
            self.highlighted = ids.index(event.character)


class WalkthroughScreen(StageScreen):
    STAGE = "walkthrough"
    AUTO_FOCUS = "#wt-list"
    BINDINGS = [
        Binding("ctrl+n", "next", "Skip / next", priority=True),
        Binding("ctrl+f", "finish", "Finish", priority=True),
        Binding("enter", "go_on", "Go on", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.run: WalkthroughRun | None = None
        self.view: StepView | None = None  # the step asked, or just answered; None while the scenario is read
        self.verdict: Verdict | None = None  # set while the answered step's verdict is shown
        self.result: WalkthroughResult | None = None  # set once the run is scored
        self.load_error: str | None = None

    def compose_body(self) -> ComposeResult:
        yield Static("", id="wt-progress")
        with VerticalScroll(id="wt-view"):
            with Collapsible(title="Scenario", id="wt-scenario"):
                yield Static("", id="wt-scenario-text")
            yield Static("", id="wt-question")
            yield ChoiceList(id="wt-choices")
            yield Input(id="wt-answer", compact=True)
            yield Static("", id="wt-error", classes="form-error")
            yield Static("", id="wt-verdict")
            yield Static("", id="wt-result")
            yield Static("", id="wt-list-title", classes="group-title")
            yield OptionList(id="wt-list")

    def on_mount(self) -> None:  # before StageScreen's, which draws the screen
        try:
            catalogue = self.app.walkthroughs()
        except InputError as err:
            self.load_error = f"cannot load the walkthroughs: {err}"
        else:
            listing = self.query_one("#wt-list", OptionList)
            listing.add_options(Option(_entry(name, p), id=name) for name, p in sorted(catalogue.items()))

    def begin(self, name: str) -> None:
        """Start walkthrough ``name`` from its first step (raises InputError for an unknown name)."""
        self.run = WalkthroughRun(find(self.app.walkthroughs(), name))
        self.view, self.verdict, self.result = None, None, None
        self.show()

    def show(self) -> None:
        run, view, verdict, result = self.run, self.view, self.verdict, self.result
        asking = self.asking
        self.query_one("#wt-progress", Static).update(self._progress())
        scenario = self.query_one("#wt-scenario", Collapsible)
        scenario.display = run is not None
        if run is not None:
            doc = run.prepared.doc
            scenario.title = f"Scenario: {doc.title}"
            scenario.collapsed = view is not None or result is not None
            text = "\n\n".join([*paragraphs(doc.scenario), f"skills scored: {', '.join(doc.skills)}"])
            self.query_one("#wt-scenario-text", Static).update(text)
        question = self.query_one("#wt-question", Static)
        question.display = view is not None and result is None
        if question.display:
            question.update(_question(view, listed=asking and view.kind == "order"))
        choices = self.query_one("#wt-choices", ChoiceList)
        choices.display = asking and view.kind == "choice"
        if choices.display:
            choices.clear_options()
            choices.add_options(Option(f"{o.letter}) {o.text}", id=o.letter) for o in view.options)
            choices.highlighted = 0
        typed = self.query_one("#wt-answer", Input)
        typed.display = asking and view.kind != "choice"
        if typed.display:
            typed.value = ""
            typed.placeholder = ORDER_HINT if view.kind == "order" else "a number; enter checks it"
        self._error("")
        shown = self.query_one("#wt-verdict", Static)
        shown.display = verdict is not None
        shown.update(_verdict(verdict) if verdict is not None else "")
        scored = self.query_one("#wt-result", Static)
        scored.display = result is not None
        scored.update(_result(result) if result is not None else "")
        picking = run is None or result is not None
        self.query_one("#wt-list", OptionList).display = picking
        title = self.query_one("#wt-list-title", Static)
        title.update(self.load_error or ("Pick a walkthrough (enter)" if run is None else "Another walkthrough (enter)"))
        title.display = picking
        self.refresh_bindings()
        self._focus(asking, picking)

    def _focus(self, asking: bool, picking: bool) -> None:
        if not self.is_current:
            return
        if asking:
            self.query_one("#wt-choices" if self.view.kind == "choice" else "#wt-answer").focus()
        elif picking and self.run is None:
            self.query_one("#wt-list").focus()
        else:  # the scenario, a verdict or the score: the view scrolls with the arrows, from its top
            view = self.query_one("#wt-view", VerticalScroll)
            view.scroll_home(animate=False)
            view.focus()

    def _progress(self) -> Text:
        run = self.run
        if run is None:
            return Text("Walkthroughs: each step asks, checks, explains; the score goes by skill", style="bold")
        text = Text(run.prepared.doc.name, style="bold")
        if self.result is not None:
            text.append("  scored" if self.result.complete else "  stopped early, scored")
        elif self.view is not None:
            text.append(f"  step {self.view.number} of {self.view.total}  [{self.view.skill}]")
            if self.verdict is not None:
                text.append("  answered", style="italic")
        else:
            text.append(f"  {len(run.prepared.doc.steps)} steps; enter starts")
        so_far = self.result or run.result()
        text.append(f"  {so_far.earned:g} of {so_far.possible:g} points")
        return text

    def _error(self, message: str) -> None:
        error = self.query_one("#wt-error", Static)
        error.update(message)
        error.display = bool(message)

    @property
    def asking(self) -> bool:
        return self.view is not None and self.verdict is None and self.result is None

    def _submit(self, answer: str | None) -> None:
        if self.asking:
            self.verdict = self.run.submit(answer)
            self.show()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            self._error("type an answer, or press ctrl+n to skip the step")
            return
        try:
            self.run.read(text)
        except Unreadable as err:
            self._error(f"cannot read that: {err}")
            return
        self._submit(text)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_list.id == "wt-choices":
            self._submit(event.option.id)
        elif event.option_list.id == "wt-list":
            self.begin(event.option.id)

    def action_next(self) -> None:
        """Skip the step asked (its verdict and explanation still show), or go on from the scenario or a verdict."""
        if self.asking:
            self._submit(None)
        else:
            self.action_go_on()

    def action_go_on(self) -> None:
        if self.run is None or self.result is not None or self.asking:
            return
        self.verdict, self.view = None, self.run.view()
        if self.view is None:
            self.result = self.run.result()
        self.show()

    def action_finish(self) -> None:
        """Stop here: the steps not answered count as skipped, as at the end of input in the CLI."""
        if self.run is not None and self.result is None:
            self.verdict, self.result = None, self.run.result()
            self.show()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("next", "finish"):
            return self.run is not None and self.result is None
        return True

    def commands(self):
        if self.run is not None and self.result is None:
            yield SystemCommand("Finish the walkthrough", "score it now; the steps left count as skipped", self.action_finish)


def _entry(name: str, prepared) -> Text:
    text = Text(name, style="bold")
    text.append(f"  {len(prepared.doc.steps)} steps\n")
    text.append(prepared.doc.title, style="italic")
    return text


def _question(view: StepView, listed: bool) -> RenderableType:
    """The ask with its unit; an ordering's items too, since they are typed as letters, not picked."""
    hint = unit_hint(view)
    text = Text(view.ask, style="bold")
    if hint:
        text.append(f"  ({hint})")
    if not listed:
        return text
    items = Table.grid(padding=(0, 1))
    items.add_column(no_wrap=True)
    items.add_column(ratio=1)
    for option in view.options:
        items.add_row(f"  {option.letter})", option.text)
    return Group(text, items)


def _verdict(v: Verdict) -> Group:
    head = Text(f"[{outcome_label(v)}]", style=OUTCOME_STYLES.get(v.outcome, "bold yellow"))
    if v.read_as or v.answer:
        head.append(f" {v.read_as or v.answer}")
    parts: list[RenderableType] = [head]
    if v.outcome is not Outcome.correct:
        parts.append(Text.assemble(("expected: ", "bold"), v.expected))
    for title, lines in (
        ("about this answer", v.why),
        ("why", paragraphs(v.explanation)),
        ("working", v.worked),
        ("the engine on these facts", v.engine),
    ):
        if lines:
            parts.append(Text(f"{title}:", style="bold"))
            parts += [Padding(line, (0, 0, 0, 2)) for line in lines]
    parts.append(Text("\nenter or ctrl+n: next step", style="italic"))
    return Group(*parts)


def _result(r: WalkthroughResult) -> Group:
    head = Text(f"score: {r.earned:g} / {r.possible:g} ({r.percent:.0f} %)", style="bold")
    if not r.complete:
        head.append(" - stopped before the end")
    skills = Table(box=None, padding=(0, 1), show_edge=False, expand=True)
    skills.add_column("skill", no_wrap=True)
    skills.add_column("score", justify="right", no_wrap=True)
    skills.add_column("covers", ratio=1)
    for s in r.skills:
        skills.add_row(s.skill, f"{s.earned:g}/{s.possible:g}", s.covers)
    tail = Text()
    traps = [v for v in r.steps if v.outcome is Outcome.trap]
    if traps:
        tail.append("traps fallen into: ", style="bold")
        tail.append("; ".join(f"{v.step} ({v.trap})" for v in traps) + "\n")
    if r.debrief:
        tail.append("what was found: ", style="bold")
        tail.append("\n\n".join(paragraphs(r.debrief)) + "\n")
    if r.source:
        tail.append(f"source: {r.source}\n")
    return Group(head, skills, tail)
