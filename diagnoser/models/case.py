"""The case file: one diagnosis's inputs in one versioned document.

A case is the workload pin, optional figures someone already used for a bound (so the
guards can check how they were made), and the observation table. ``diagnoser analyze --case``
and ``diagnoser probe --json`` write parts of it; ``diagnoser diagnose`` reads it.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from diagnoser.models.documents import load_model
from diagnoser.models.observations import Observations
from diagnoser.models.units import BandwidthGBs, Positive, StepBytes, TokenRate
from diagnoser.models.workload import Boundary, Workload

CASE_SCHEMA_VERSION = 2
# Version 2 only added optional fields (serving metrics, runs, host costs, ...): a version-1
# case is a valid version-2 case as it stands, so it loads without a migration step.
READABLE_CASE_VERSIONS = (2, 1)


class BytesBasis(str, Enum):
    """How a quoted bytes-per-step figure was obtained."""

    active_parameters = "active_parameters"  # active params x bytes/param: not a traffic count
    total_parameters = "total_parameters"
    per_rank_estimate = "per_rank_estimate"  # what `diagnoser bound` computes
    measured = "measured"  # a DRAM-byte counter (Nsight Compute, rocprof)


class BoundInputs(BaseModel):
    """A bound someone already computed (e.g. the spreadsheet's), to be checked, not trusted."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    bytes_per_step: StepBytes | None = Field(default=None, description="bytes per step the quoted bound used")
    bytes_basis: BytesBasis | None = Field(default=None, description="how those bytes were obtained")
    bandwidth_gbs: BandwidthGBs | None = Field(default=None, description="bandwidth the quoted bound used, GB/s")
    bandwidth_is_summed_over_ranks: bool | None = Field(default=None, description="the bandwidth adds up several GPUs")
    predicted_tokens_per_s: TokenRate | None = Field(default=None, description="the rate the quoted bound promised")
    boundary: Boundary = Field(default=Boundary.device_step, description="where the quoted bound applies")


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    schema_version: int = Field(default=CASE_SCHEMA_VERSION, description="2; version-1 cases load unchanged")
    title: str = Field(default="", description="what was observed, in a line")
    workload: Workload | None = Field(default=None, description="the pin: model, hardware, precision, context, batch, layout, observation")
    bound_inputs: BoundInputs | None = Field(default=None, description="a bound someone already computed, to be checked")
    observations: Observations = Field(default_factory=Observations, description="what traces, probes, metrics and reports established")
    sources: dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w.\[\]-]*$", max_length=300)],
                  Annotated[str, StringConstraints(max_length=2000)]] = Field(
        default_factory=dict,
        max_length=4096,
        description="where each fact came from: a dotted field path (observations.server.max_num_seqs) -> endpoint, metric, file or flag",
    )

    @field_validator("workload", mode="before")
    @classmethod
    def _hardware_unknown_unless_given(cls, value: Any) -> Any:
        """A case is evidence: a GPU nobody named is unknown, never the calculator's default."""
        if isinstance(value, dict) and "hardware" not in value:
            return {**value, "hardware": None}
        return value


def load_case(path: str | Path) -> Case:
    return load_model(path, Case, "a case file", version=READABLE_CASE_VERSIONS)
