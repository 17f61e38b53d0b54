"""What-if: the Amdahl, speculation and batching calculators, prefilled from the case.

Each result is the calculator's own (``diagnoser.whatif``, ``diagnoser.bound.batching``) as the
CLI renders it, recomputed as the values change.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult, SystemCommand
from textual.containers import VerticalScroll
from textual.widgets import Input, Select, Static, TabbedContent, TabPane

from diagnoser.errors import InputError
from diagnoser.report import render_amdahl, render_batch, render_speculation
from diagnoser.tui.fields import FieldSpec
from diagnoser.tui.screens.base import StageScreen
from diagnoser.tui.widgets import FormField, as_text
from diagnoser.whatif import amdahl, speculation
from diagnoser.whatif_inputs import BUDGET_PARTS, budget_parts, speculation_inputs

SPECULATION = (
    ("acceptance", "constant conditional acceptance a in [0, 1]"),
    ("draft_length", "k drafted tokens per cycle"),
    ("verify_ms", "target verification cost per cycle"),
    ("draft_ms", "drafting cost per cycle"),
    ("other_ms", "other work per cycle"),
    ("ordinary_step_ms", "an ordinary one-token decode step"),
)
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
CALCULATORS = ("amdahl", "speculation", "batching")


class WhatIfScreen(StageScreen):
    STAGE = "whatif"
    AUTO_FOCUS = "#whatif-tabs Tabs"

    def compose_body(self) -> ComposeResult:
        with TabbedContent(id="whatif-tabs"):
            with TabPane("Amdahl", id="tab-amdahl"):
                with VerticalScroll(id="amdahl"):
                    for part in BUDGET_PARTS:
                        yield FormField(FieldSpec(f"amdahl.{part}", "ms of the step"), label=f"{part} ms")
                    yield FormField(FieldSpec("amdahl.change", "", "choice", BUDGET_PARTS), "launch", label="change part")
                    yield FormField(FieldSpec("amdahl.new_ms", "its new time"), 0, label="to ms")
                    yield Static("", id="amdahl-result", classes="calc-result")
            with TabPane("Speculation", id="tab-speculation"):
                with VerticalScroll(id="speculation"):
                    for key, help_text in SPECULATION:
                        yield FormField(FieldSpec(f"speculation.{key}", help_text), label=key)
                    yield Static("", id="speculation-result", classes="calc-result")
            with TabPane("Batching", id="tab-batching"):
                with VerticalScroll(id="batching"):
                    yield FormField(FieldSpec("batching.sizes", "batch sizes, e.g. [1, 8, 32, 64]"), label="batch sizes")
                    yield Static("", id="batching-result", classes="calc-result")

    def _field(self, key: str) -> FormField:
        return next(f for f in self.query(FormField) if f.spec.key == key)

    def _set(self, key: str, value: Any) -> None:
        control = self._field(key).control
        if isinstance(control, Select):
            control.value = value
        else:
            control.value = as_text(value)

    def show(self) -> None:
        """Prefill from the case as it now stands, then compute."""
        w = self.workspace
        budget = w.session.case.observations.budget
        known = speculation_inputs(w.session.case, w.diagnosis.reference_step_ms)
        pin = w.session.case.workload
        sizes = sorted(set(DEFAULT_BATCHES) | ({pin.batch} if pin is not None else set()))
        with self.prevent(Input.Changed, Select.Changed):  # one computation after the refill, not one per field
            for part, ms in (budget_parts(budget) if budget is not None else {}).items():
                self._set(f"amdahl.{part}", ms)
            for key, _ in SPECULATION:
                self._set(f"speculation.{key}", known.get(key, 0 if key == "other_ms" else None))
            self._set("batching.sizes", "[" + ", ".join(map(str, sizes)) + "]")
        for name in CALCULATORS:
            self.recompute(name)

    def on_input_changed(self, event: Input.Changed) -> None:
        self._changed(event.control)

    def on_select_changed(self, event: Select.Changed) -> None:
        self._changed(event.control)

    def _changed(self, control) -> None:
        """Recompute only the calculator whose field changed."""
        owner = next((a for a in control.ancestors if isinstance(a, FormField)), None)
        if owner is not None:
            self.recompute(owner.spec.key.partition(".")[0])

    def _numbers(self, prefix: str, keys) -> dict[str, float]:
        values, missing = {}, []
        for key in keys:
            value = self._field(f"{prefix}.{key}").value
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                missing.append(key)
            else:
                values[key] = value
        if missing:
            raise ValueError(f"give a number for {', '.join(missing)}")
        return values

    def recompute(self, name: str) -> None:
        try:
            text = getattr(self, f"_{name}")()
        except (ValueError, InputError) as err:
            text = str(err)
        self.query_one(f"#{name}-result", Static).update(text)

    def _amdahl(self) -> str:
        parts = self._numbers("amdahl", BUDGET_PARTS)
        change = self._field("amdahl.change").value
        new_ms = self._numbers("amdahl", ["new_ms"])["new_ms"]
        return render_amdahl(amdahl(parts, change, new_ms))

    def _speculation(self) -> str:
        v = self._numbers("speculation", [key for key, _ in SPECULATION])
        return render_speculation(speculation(v["acceptance"], int(v["draft_length"]), v["verify_ms"], v["draft_ms"], v["other_ms"], v["ordinary_step_ms"]))

    def _batching(self) -> str:
        from diagnoser.bound.batching import batch_estimate

        pin = self.workspace.session.case.workload
        if pin is None or self.workspace.bound is None:
            raise ValueError("pin the workload first (Pin, 1): the batching estimate re-runs the bound at each size")
        sizes = self._field("batching.sizes").value
        if not isinstance(sizes, list) or not sizes or not all(isinstance(s, int) and s >= 1 for s in sizes):
            raise ValueError("batch sizes: a list of whole numbers, e.g. [1, 8, 32, 64]")
        return render_batch(batch_estimate(pin, sizes, "batching"))

    def commands(self):
        for tab in CALCULATORS:
            yield SystemCommand(f"What-if: {tab}", f"open the {tab} calculator", lambda tab=tab: self._open(tab))
        yield SystemCommand("What-if: refill from the case", "put the case's figures back in every calculator", self.show)

    def _open(self, tab: str) -> None:
        self.query_one(TabbedContent).active = f"tab-{tab}"
