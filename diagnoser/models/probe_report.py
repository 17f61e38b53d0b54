"""The document ``diagnoser probe --json`` writes and ``--probe-report`` reads back.

A report is measured on the GPU box and read anywhere else, possibly by another version, so
it is read as strict JSON and validated whole: one line names the file and the first figure
that is missing, mistyped or not finite, and a report of another ``schema_version`` is
refused by number rather than half-read.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from diagnoser.errors import InputError
from diagnoser.models.probe_results import Facts, ProbeResult

# 2: facts typed per probe (every figure present, finite, in its unit); skipped and failed
# results carry none. Version 1 facts were free-form, so a version 1 report is refused.
PROBE_SCHEMA_VERSION = 2


class ProbeReport(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: int = Field(default=PROBE_SCHEMA_VERSION, description="bumped on incompatible changes")
    created: str = Field(description="ISO 8601 time the run started")
    host: str = Field(description="host name of the machine measured")
    torch_version: str | None = Field(default=None, description="torch on that machine; null without the gpu extra")
    results: list[ProbeResult] = Field(default_factory=list, description="one per probe, in the order they ran")

    def result(self, name: str) -> ProbeResult | None:
        """The result of one probe, or None when it was not run."""
        return next((r for r in self.results if r.name == name), None)

    def ok_facts(self, name: str) -> Facts | None:
        """The figures of one probe that succeeded; None when it was skipped, failed or not run."""
        result = self.result(name)
        return result.facts if result is not None else None


def load_report(path: str | Path) -> ProbeReport:
    """A saved ``probe --json`` report, or one ``InputError`` line naming the file and the field."""
    from diagnoser.jsondoc import read_json
    from diagnoser.models.documents import validation_message

    data = read_json(path, "a probe report")
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a probe report (a JSON object at the top level)")
    found = data.get("schema_version", PROBE_SCHEMA_VERSION)
    if found != PROBE_SCHEMA_VERSION:
        raise InputError(
            f"{path}: a probe report: schema_version {found} not supported "
            f"(this diagnoser reads {PROBE_SCHEMA_VERSION}; run the probes again)"
        )
    try:
        return ProbeReport.model_validate(data)
    except ValidationError as err:
        raise InputError(validation_message(err, str(path), ProbeReport)) from None
