"""Small widgets every screen shares: the stage sidebar, a form field, bar and waterfall charts.

Charts draw figures the models already hold; scaling a bar to the cells available is the
only arithmetic they do, and they redraw at whatever width the terminal gives them.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Input, Label, OptionList, Select, Static
from textual.widgets.option_list import Option

from diagnoser.tui.fields import FieldSpec, parse_text
from diagnoser.report.untrusted import markup_safe

STAGES = (
    ("pin", "Pin"),
    ("bound", "Bound"),
    ("evidence", "Evidence"),
    ("interview", "Interview"),
    ("hypotheses", "Hypotheses"),
    ("whatif", "What-if"),
    ("decision", "Decision"),
    ("walkthrough", "Walkthrough"),
)
LABEL_WIDTH = 22


class Sidebar(OptionList):
    """The stages in order, numbered by the key that opens each."""

    class Go(Message):
        def __init__(self, stage: str) -> None:
            super().__init__()
            self.stage = stage

    def __init__(self, current: str) -> None:
        super().__init__(*(Option(f"{i} {title}", id=stage) for i, (stage, title) in enumerate(STAGES, 1)), id="sidebar")
        self.current = current

    def on_mount(self) -> None:
        self.highlighted = next(i for i, (stage, _) in enumerate(STAGES) if stage == self.current)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.post_message(self.Go(event.option.id))


class FormField(Widget):
    """One labelled input (typed text, or a choice), with its validation message under it."""

    def __init__(self, spec: FieldSpec, value: Any = None, label: str | None = None, placeholder: str = "") -> None:
        super().__init__(classes="field")
        self.spec = spec
        self._initial = value
        self._label = label or spec.key.rpartition(".")[2].replace("_", " ")
        self._placeholder = placeholder or spec.help

    def compose(self) -> ComposeResult:
        with Horizontal(classes="field-row"):
            yield Label(self._label, classes="field-label")
            if self.spec.kind == "flag":
                yield Select([("yes", True), ("no", False)], value=self._initial if self._initial is not None else Select.NULL, compact=True, prompt="unknown")
            elif self.spec.kind == "choice":
                value = getattr(self._initial, "value", self._initial)
                yield Select([(c, c) for c in self.spec.choices], value=value if value is not None else Select.NULL, compact=True, prompt=self._placeholder or "-")
            else:
                yield Input(as_text(self._initial), placeholder=self._placeholder, compact=True)
        yield Static("", classes="field-error")

    @property
    def control(self) -> Input | Select:
        return self.query_one("Input, Select")

    @property
    def value(self) -> Any:
        control = self.control
        if isinstance(control, Select):
            return None if control.value is Select.NULL else control.value
        return parse_text(control.value)

    def set_error(self, message: str | None) -> None:
        error = self.query_one(".field-error", Static)
        error.update(markup_safe(message or ""))
        error.display = bool(message)
        self.set_class(bool(message), "-invalid")


def as_text(value: Any) -> str:
    """A value as a field shows it: whole floats without '.0', lists in brackets, enums by value."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(getattr(value, "value", value))


class _Chart(Widget):
    """Rows of (label, value, value as text), each drawn as a bar over the cells the widget has."""

    DEFAULT_CSS = "_Chart { height: auto; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.title = ""
        self.rows: list[tuple[str, float, str]] = []

    def show(self, title: str, rows: list[tuple[str, float, str]]) -> None:
        self.title, self.rows = title, rows
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.rows) + (1 if self.title else 0)

    def spans(self, width: int) -> list[tuple[int, int]]:
        """Where each row's bar starts and how many cells it takes."""
        raise NotImplementedError

    def render(self) -> Text:
        out = Text()
        if self.title:
            out.append(self.title + "\n", style="bold")
        label_w = max((len(r[0]) for r in self.rows), default=0) + 1
        text_w = max((len(r[2]) for r in self.rows), default=0) + 1
        width = max(self.content_size.width - label_w - text_w, 4)
        for i, ((label, _, text), (begin, cells)) in enumerate(zip(self.rows, self.spans(width))):
            out.append(label.ljust(label_w) + " " * begin)
            out.append("█" * cells, style=_COLOURS[i % len(_COLOURS)])
            out.append(" " * max(width - begin - cells, 0) + text.rjust(text_w) + ("\n" if i < len(self.rows) - 1 else ""))
        return out


_COLOURS = ("#d08770", "#88c0d0", "#a3be8c", "#b48ead", "#ebcb8b", "#81a1c1", "#bf616a")


class BarChart(_Chart):
    """Bars from the left edge, scaled to the largest value."""

    def spans(self, width: int) -> list[tuple[int, int]]:
        top = max((r[1] for r in self.rows), default=0) or 1
        return [(0, round(width * value / top)) for _, value, _ in self.rows]


class Waterfall(_Chart):
    """Parts of one step laid end to end: each bar starts where the one before ended."""

    def spans(self, width: int) -> list[tuple[int, int]]:
        total = sum(r[1] for r in self.rows) or 1
        out, start = [], 0.0
        for _, value, _ in self.rows:
            begin = round(width * start / total)
            start += value
            out.append((begin, max(round(width * start / total) - begin, 1 if value else 0)))
        return out
