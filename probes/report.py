"""The document ``diagnoser probe --json`` prints: the contract between probes and everything else.

It is plain pydantic with no torch inside, so the rule base, the TUI and ``diagnoser schema
probe`` can read a saved report on a machine without a GPU stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


PROBE_SCHEMA_VERSION = 1


class ProbeResult(BaseModel):
    """One probe's outcome; ``reason`` explains every status other than ok."""

    model_config = ConfigDict(extra="forbid")

    name: str
    status: Literal["ok", "skipped", "failed"]
    reason: str | None = Field(default=None, description="why the probe was skipped or failed (one line)")
    duration_s: float = Field(ge=0)
    facts: dict[str, Any] = Field(default_factory=dict, description="JSON-serialisable measurements")


class ProbeReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = Field(default=PROBE_SCHEMA_VERSION, description="bumped on incompatible changes")
    created: str = Field(description="ISO 8601 time the run started")
    host: str
    torch_version: str | None = None
    results: list[ProbeResult] = Field(default_factory=list)

    def result(self, name: str) -> ProbeResult | None:
        """The result of one probe, or None when it was not run."""
        return next((r for r in self.results if r.name == name), None)


def load_report(path: str | Path) -> ProbeReport:
    """A saved ``probe --json`` report, with one-line errors for the usual mistakes."""
    from diagnoser.models.documents import load_model

    return load_model(path, ProbeReport, "a probe report", version=PROBE_SCHEMA_VERSION)
