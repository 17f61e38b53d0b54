"""Pin: what exactly is decoded, on what, and where the clock was read.

The fields are the workload model's own; applying the form validates it as a case file's
``workload:`` would be, and each error appears under the field it names.
"""

from __future__ import annotations

from typing import Any

import yaml
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Collapsible, Static, TextArea

from diagnoser.errors import InputError
from diagnoser.models.session import Source, SourceKind
from diagnoser.models.workload import Layout, Observed, Precision, Workload
from diagnoser.session_ops import FieldErrors, pin_workload, with_source
from diagnoser.tui.fields import error_for, field_spec, model_fields, nested, parse_document
from diagnoser.tui.screens.base import StageScreen
from diagnoser.tui.widgets import FormField
from diagnoser.report.untrusted import markup_safe


def _workload_field(name: str):
    f = Workload.model_fields[name]
    return field_spec(name, f.annotation, f.description or "")


GROUPS = (
    ("model and GPU", (_workload_field("model"), _workload_field("hardware"), _workload_field("measured_bandwidth_gbs"))),
    ("precision per component", model_fields(Precision, "precision.")),
    ("work per step", (_workload_field("context"), _workload_field("batch"), _workload_field("tokens_per_step"))),
    ("layout", model_fields(Layout, "layout.")),
    ("observed, and at which boundary", model_fields(Observed, "observed.")),
)
LABELS = {
    "hardware": "GPU",
    "measured_bandwidth_gbs": "bandwidth GB/s",
    "precision.expert_weights": "expert weights",
    "precision.kv_cache": "KV cache",
    "precision.lm_head": "LM head",
    "tokens_per_step": "tokens per step",
    "layout.expert_tp": "expert TP",
    "observed.step_ms": "step ms",
    "observed.tokens_per_s": "tokens/s (group)",
}
HELP = {
    "model": "preset (qwen3-30b-a3b, deepseek-v3, ...) or a config.json path",
    "hardware": "preset (h100-sxm, h200, ...) or the GPU name nvidia-smi prints",
    "context": "mean context, or [one, per, sequence]",
}


def _current(workload: Workload | None) -> dict[str, Any]:
    """The pin as the form's fields show it; without a pin, the model's defaults and no context."""
    doc = (workload or Workload(hardware=None)).model_dump(mode="json")
    context = workload.context if workload is not None else None
    doc["context"] = None if context is None else context.per_sequence if context.per_sequence is not None else context.mean
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict) and key != "model":
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


class PinScreen(StageScreen):
    STAGE = "pin"
    BINDINGS = [Binding("ctrl+s", "apply", "Apply pin", priority=True)]
    AUTO_FOCUS = "#body Input"

    def compose_body(self) -> ComposeResult:
        values = _current(self.workspace.session.case.workload)
        inline = values.get("model") if isinstance(values.get("model"), dict) else None
        with VerticalScroll(id="pin-form"):
            yield Static("", id="pin-error", classes="form-error")
            for title, specs in GROUPS:
                yield Static(title, classes="group-title")
                for spec in specs:
                    value = None if spec.key == "model" and inline is not None else values.get(spec.key)
                    yield FormField(spec, value, label=LABELS.get(spec.key), placeholder=HELP.get(spec.key, ""))
                if title == "model and GPU":
                    with Collapsible(title="inline model config (YAML, instead of a name)", collapsed=inline is None):
                        yield TextArea(yaml.safe_dump(inline, sort_keys=False) if inline else "", id="model-inline")
            with Horizontal(classes="buttons"):
                yield Button("Apply pin (ctrl+s)", id="apply", variant="primary", compact=True)
            yield Static("", id="pin-status")

    def show(self) -> None:
        w = self.workspace
        pin = w.session.case.workload
        status = "no pin yet: name the model, the GPU, the batch and the context" if pin is None else (w.diagnosis.bound_note or "pinned; the Bound screen shows what it implies")
        self.query_one("#pin-status", Static).update(markup_safe(status))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self.action_apply()

    def _document(self) -> dict[str, Any]:
        values = {f.spec.key: f.value for f in self.query(FormField)}
        inline = self.query_one("#model-inline", TextArea).text
        if inline.strip():
            values["model"] = parse_document(inline)
        return nested(values)

    def action_apply(self) -> None:
        fields = list(self.query(FormField))
        keys = [f.spec.key for f in fields]
        errors: dict[str, str] = {}
        try:
            doc = self._document()
            session = self.workspace.session
            case = pin_workload(session.case, doc)
            self.app.commit(with_source(session, Source(kind=SourceKind.pin, label="Pin screen", sections=["workload"]), case=case))
        except FieldErrors as err:
            errors = err.fields
        except (InputError, ValueError) as err:
            errors = {"": str(err)}
        for field in fields:
            field.set_error(error_for(field.spec.key, errors, keys))
        form_error = errors.get("", "")
        if errors and not form_error and not any(error_for(k, errors, keys) for k in keys):
            form_error = "; ".join(f"{k}: {v}" for k, v in errors.items())
        banner = self.query_one("#pin-error", Static)
        banner.update(markup_safe(form_error))
        banner.display = bool(form_error)
        if not errors:
            self.query_one("#pin-status", Static).update("pin applied; the Bound screen shows what it implies")
