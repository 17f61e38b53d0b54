"""Interview: the engine's next questions, one at a time, each answered into the case.

The question, why it matters (what it would bound or let evaluate) and how to answer it come
from ``Diagnosis.questions``; the answer form comes from the case model. An answer becomes a
fact through ``apply_answer``, the engine runs again, and the ranking below moves in place.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Static, TextArea

from diagnoser.errors import InputError
from diagnoser.models.hypothesis import Kind, Question
from diagnoser.models.session import Answer, Source, SourceKind
from diagnoser.session_ops import FieldErrors, answer_section, apply_answer, ranking_changes, with_source
from diagnoser.tui.fields import answer_form, error_for, nested, parse_document
from diagnoser.tui.screens.base import StageScreen
from diagnoser.tui.widgets import FormField

RANKING_SHOWN = 5
# How next_questions weighs a question, in the words a user needs to compare two of them.
WEIGHT_MEANING = "10 for each open cause an answer would bound, 5 for a possible one, up to 4 for each rule it lets evaluate"


class InterviewScreen(StageScreen):
    STAGE = "interview"
    # The question has focus on arrival, not the answer box: a digit typed there would be an answer,
    # not the stage key a user presses to move on. Enter (or a click) goes into the answer.
    AUTO_FOCUS = "#interview-view"
    BINDINGS = [
        Binding("enter", "into_answer", "Type the answer"),
        Binding("ctrl+s", "answer", "Answer", priority=True),
        Binding("ctrl+n", "next", "Next", priority=True),
        Binding("ctrl+b", "previous", "Back", priority=True),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.index = 0
        self.asked: str | None = None
        self.changes: list[str] = []

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="interview-view"):
            yield Static("", id="question")
            yield Vertical(id="answer")
            yield Static("", id="answer-error", classes="form-error")
            yield Static(
                "enter: type the answer (esc leaves it, so digits change stage again). blank: not known. "
                "Or run the command and load its result on Evidence (3)",
                classes="hint",
            )
            with Horizontal(classes="buttons"):
                yield Button("Answer ^s", id="do-answer", variant="primary", compact=True)
                yield Button("Next ^n", id="do-next", compact=True)
                yield Button("Back ^b", id="do-previous", compact=True)
            yield Static("", id="changes")
            yield Static("", id="ranking")

    @property
    def questions(self) -> list[Question]:
        return self.workspace.diagnosis.questions

    @property
    def question(self) -> Question | None:
        qs = self.questions
        return qs[min(self.index, len(qs) - 1)] if qs else None

    def show(self) -> None:
        q = self.question
        self.query_one("#question", Static).update(self._question_text(q))
        if q is not None and q.input != self.asked:
            self.asked = q.input
            self.call_later(self._build_form, q)
        changes = self.query_one("#changes", Static)
        changes.update(Text("the last answer changed: ", style="bold") + Text("; ".join(self.changes)))
        changes.display = bool(self.changes)
        self.query_one("#ranking", Static).update(self._ranking())

    def _question_text(self, q: Question | None) -> Text:
        if q is None:
            return Text("No open question: every input the rules could use is either given or would settle nothing.")
        titles = {h.id: h.title for h in self.workspace.diagnosis.hypotheses}
        text = Text()
        text.append(f"Question {self.questions.index(q) + 1} of {len(self.questions)}: ", style="bold")
        text.append(q.label, style="bold cyan")
        text.append(f"  (weight {q.score:g}: {WEIGHT_MEANING})\n")
        if q.would_bound:
            text.append("why: ", style="bold")
            text.append("bounds or refutes " + "; ".join(f"{i} ({titles.get(i, i)})" for i in q.would_bound) + "\n")
        if q.would_evaluate:
            text.append("why: " if not q.would_bound else "also: ", style="bold")
            text.append("lets " + ", ".join(q.would_evaluate) + " evaluate\n")
        text.append("how: ", style="bold")
        text.append(q.how)
        return text

    async def _build_form(self, q: Question) -> None:
        box = self.query_one("#answer", Vertical)
        await box.remove_children()
        self._error("")
        try:
            form = answer_form(q.input)
        except InputError as err:
            await box.mount(Static(str(err)))
            return
        if form.template is not None:
            await box.mount(TextArea(form.template, id="answer-document", soft_wrap=True))
        else:
            section = q.input.partition(".")[0]
            current = getattr(self.workspace.session.case.observations, section, None)
            given = current if current is not None and not isinstance(current, list) else None
            await box.mount(*(FormField(spec, getattr(given, spec.key, None)) for spec in form.fields))

    def action_into_answer(self) -> None:
        fields = self.query("#answer Input, #answer TextArea, #answer Select")
        if fields:
            fields.first().focus()

    def _answer_value(self, q: Question):
        documents = self.query("#answer-document")
        if documents:
            value = parse_document(documents.first(TextArea).text)
            if value is None:
                raise ValueError("nothing given: write the entries, or press ctrl+n to skip the question")
            return value
        values = {f.spec.key: f.value for f in self.query(FormField)}
        if "." in q.input:
            value = next(iter(values.values()))
            if value is None:
                raise ValueError("nothing given: type the value, or press ctrl+n to skip the question")
            return value
        doc = nested(values)
        if not doc:
            raise ValueError("nothing given: fill at least one field, or press ctrl+n to skip the question")
        return doc

    def action_answer(self) -> None:
        q = self.question
        if q is None:
            return
        fields = list(self.query(FormField))
        keys = [f.spec.key for f in fields]
        errors: dict[str, str] = {}
        try:
            answer = Answer(input=q.input, value=self._answer_value(q))
            session = self.workspace.session
            before = self.workspace.diagnosis
            case = apply_answer(session.case, answer)
            source = Source(kind=SourceKind.answer, label=f"interview: {q.label}", sections=[answer_section(q.input)])
            self.app.commit(with_source(session, source, case=case, answers=[*session.answers, answer]))
            self.changes = ranking_changes(before, self.workspace.diagnosis) or ["the ranking did not move"]
            self.show()
        except FieldErrors as err:
            errors = err.fields
            self._error("" if any(error_for(k, errors, keys) for k in keys) else str(err))
        except (InputError, ValueError) as err:
            self._error(str(err))
        for field in fields:
            if field.is_attached:
                field.set_error(error_for(field.spec.key, errors, keys))

    def _error(self, message: str) -> None:
        banner = self.query_one("#answer-error", Static)
        banner.update(message)
        banner.display = bool(message)

    def _move(self, step: int) -> None:
        if self.questions:
            self.index = (min(self.index, len(self.questions) - 1) + step) % len(self.questions)
            self.show()

    def action_next(self) -> None:
        self._move(1)

    def action_previous(self) -> None:
        self._move(-1)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        getattr(self, f"action_{(event.button.id or '').removeprefix('do-')}")()

    def _ranking(self) -> Text:
        causes = [h for h in self.workspace.diagnosis.hypotheses if h.kind is Kind.cause]
        text = Text("ranking now", style="bold")
        for i, h in enumerate(causes[:RANKING_SHOWN], 1):
            text.append(f"\n{i}. {h.id}", style="bold" if i == 1 else "")
            text.append(f"  {h.grade.value if h.grade else '-'}  {f'≤{h.gain.speedup:.3g}x' if h.gain else 'not bounded yet'}")
        if not causes:
            text.append("\nno cause named yet")
        return text

    def commands(self):
        for i, q in enumerate(self.questions):
            yield SystemCommand(f"Ask: {q.label}", q.how, lambda i=i: self._jump(i))

    def _jump(self, index: int) -> None:
        self.index = index
        self.show()
