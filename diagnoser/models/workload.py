"""The workload pin: what exactly is being decoded, on what, and where the clock was read.

Most "the server is 10x off" reports compare numbers that describe different work: another
batch, another context, another precision, or a client-side rate against a device-side bound.
Pinning these first is what makes every later number comparable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, field_validator, model_validator

from diagnoser.models.boundary import Boundary
from diagnoser.models.precision import DType
from diagnoser.models.units import BandwidthGBs, Positive, TokenRate


MAX_RANKS = 2**20
MAX_STAGES = 4096


class Precision(BaseModel):
    """Storage format per component; experts may differ from attention (e.g. fp8 experts, bf16 attention)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    weights: DType = Field(default=DType.bf16, description="storage format of the weights")
    expert_weights: DType | None = Field(default=None, description="defaults to weights")
    kv_cache: DType = Field(default=DType.bf16, description="storage format of the KV cache")
    activations: DType = Field(default=DType.bf16, description="format of the activations")
    lm_head: DType | None = Field(default=None, description="defaults to weights")

    @property
    def experts(self) -> DType:
        return self.expert_weights or self.weights

    @property
    def head(self) -> DType:
        return self.lm_head or self.weights


class Layout(BaseModel):
    """Parallel layout of one serving group.

    ``tp`` shards attention and dense MLPs; ``dp`` > 1 means data-parallel attention (each
    DP rank owns a share of the sequences and a full copy of the attention weights, sharded
    by ``tp`` inside the rank); ``ep`` spreads routed experts over ``ep`` ranks, and each
    expert is further sharded by ``expert_tp`` (default: ``tp`` when ``ep`` is 1, else 1).
    ``pp`` splits layers into stages.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # The upper limits are far past any deployment; they keep a typo from becoming a million-stage bound.
    tp: int = Field(default=1, ge=1, le=MAX_RANKS, description="tensor-parallel ranks")
    ep: int = Field(default=1, ge=1, le=MAX_RANKS, description="expert-parallel ranks")
    pp: int = Field(default=1, ge=1, le=MAX_STAGES, description="pipeline stages")
    dp: int = Field(default=1, ge=1, le=MAX_RANKS, description="data-parallel attention ranks sharing one expert group")
    expert_tp: int | None = Field(
        default=None, ge=1, le=MAX_RANKS, description="shards of each expert (default: tp when ep is 1, else 1)"
    )

    @property
    def moe_tp(self) -> int:
        if self.expert_tp is not None:
            return self.expert_tp
        return self.tp if self.ep == 1 else 1

    @property
    def world_size(self) -> int:
        return self.tp * self.dp * self.pp


class Context(BaseModel):
    """Context length of the sequences in the batch: one mean, or one value per sequence."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    mean: float | None = Field(default=None, ge=0, description="mean context length of the sequences in the batch")
    per_sequence: list[int] | None = Field(default=None, description="context length of each sequence")

    @model_validator(mode="after")
    def _one_of(self) -> "Context":
        if (self.mean is None) == (self.per_sequence is None):
            raise ValueError("give exactly one of 'mean' or 'per_sequence'")
        if self.per_sequence is not None and any(c < 0 for c in self.per_sequence):
            raise ValueError("context lengths must be >= 0")
        return self


class Observed(BaseModel):
    """What was measured, and at which boundary."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # The same range as every other positive figure (models.units): no denormal that divides to infinity.
    step_ms: Positive | None = Field(default=None, description="time per decode step, ms")
    tokens_per_s: TokenRate | None = Field(default=None, description="aggregate emitted tokens/s over the group")
    boundary: Boundary = Field(default=Boundary.device_step, description="where the observation was read")

    @model_validator(mode="after")
    def _something(self) -> "Observed":
        if self.step_ms is None and self.tokens_per_s is None:
            raise ValueError("give step_ms or tokens_per_s")
        return self


class Workload(BaseModel):
    """Everything the per-rank bound needs, plus the observation it is compared with."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str | dict[str, Any] | None = Field(
        default=None, description="preset name, path to config.json, or an inline config; absent when not known (no bound then)"
    )
    hardware: str | None = Field(
        default="h100-sxm",
        description="hardware preset, or the GPU name a tool prints ('NVIDIA H100 80GB HBM3'); a name no preset matches "
        "is kept as unknown and gives no bound. In a case file a missing hardware is unknown, not this default",
    )
    measured_bandwidth_gbs: BandwidthGBs | None = Field(default=None, description="replaces the datasheet figure, GB/s")
    precision: Precision = Field(default_factory=Precision, description="storage format per component")
    context: Context = Field(default_factory=lambda: Context(mean=0), description="context length: a mean, or one value per sequence")
    batch: int = Field(default=1, ge=1, description="sequences decoding together across the whole group")
    tokens_per_step: float = Field(default=1.0, ge=1e-3, le=1024, description="tokens emitted per sequence per step (above 1 with speculation)")
    query_tokens_per_step: int = Field(default=1, ge=1, description="tokens each sequence feeds the model per step (k+1 when verifying k drafts)")
    layout: Layout = Field(default_factory=Layout, description="parallel layout of the serving group")
    expert_token_histogram: list[int] | list[list[int]] | None = Field(
        default=None,
        description="measured tokens per routed expert for one step: one list for every MoE layer, or one list per MoE layer",
    )
    other_state_bytes: dict[str, NonNegativeFloat] = Field(
        default_factory=dict, description="named extra bytes each rank reads per step (indexer caches, SSM state, ...)"
    )
    observed: Observed | None = Field(default=None, description="the measurement the bound is compared with")

    @field_validator("context", mode="before")
    @classmethod
    def _context_shorthand(cls, value: Any) -> Any:
        if isinstance(value, (int, float)):
            return {"mean": value}
        if isinstance(value, list):
            return {"per_sequence": value}
        return value

    @model_validator(mode="after")
    def _context_matches_batch(self) -> "Workload":
        per_seq = self.context.per_sequence
        if per_seq is not None and len(per_seq) != self.batch:
            raise ValueError(f"context.per_sequence has {len(per_seq)} entries but batch is {self.batch}")
        if self.batch % self.layout.dp:
            raise ValueError(f"batch {self.batch} does not split over dp={self.layout.dp} ranks; give a multiple")
        return self

    @property
    def context_given(self) -> bool:
        """The context's default of 0 is no evidence: a pin without one counts no KV-cache read."""
        return "context" in self.model_fields_set

    @property
    def precision_given(self) -> bool:
        """The bf16 default is an assumption: a quantized model's floor is lower by the bytes it does not move."""
        return "precision" in self.model_fields_set

    @property
    def mean_context(self) -> float:
        per_seq = self.context.per_sequence
        return sum(per_seq) / len(per_seq) if per_seq is not None else float(self.context.mean or 0.0)


def load_workload(path: str | Path) -> Workload:
    from diagnoser.models.documents import load_model

    return load_model(path, Workload, "a workload")
