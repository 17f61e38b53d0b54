"""What one rank must hold in HBM: every weight shard it owns and the KV cache of its sequences.

The bound counts bytes *moved* per step (only the experts a step touches); capacity counts
bytes *resident* (every local expert, and the whole KV cache at the sequences' context). A
batch whose weights and KV do not fit is not a slower batch but an impossible one, so the
batching calculator stops there instead of promising its rate. Activations, CUDA-graph pools,
the allocator's reserve and fragmentation come on top: this is the least a rank needs.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from diagnoser.bound.traffic import (
    SequenceShare, attention_shard, attention_weight_elements, cached_token_layers, check_layout, dp_shares,
    linear_attention_shard, mlp_elements, norm_elements, stage_layers,
)
from diagnoser.models.hardware import Hardware
from diagnoser.models.model_spec import ModelSpec
from diagnoser.models.precision import bytes_per_element
from diagnoser.models.workload import Workload

GIB = 2**30

LEFT_OUT = "activations, CUDA-graph pools, the allocator's reserve and fragmentation"


class Residency(BaseModel):
    """HBM the fullest rank needs for weights and KV cache, against what the device has."""

    weights_bytes: float = Field(description="weight shards resident on the fullest rank, bytes")
    kv_bytes: float = Field(description="KV cache of that rank's sequences at their context (and a linear-attention "
                            "layer's recurrent state), bytes")
    capacity_bytes: float | None = Field(description="HBM of one device, bytes (None: the device's memory is not known)")
    left_out: str = LEFT_OUT

    @property
    def needed_bytes(self) -> float:
        return self.weights_bytes + self.kv_bytes

    @property
    def fits(self) -> bool:
        """Unknown capacity counts as fitting: nothing says it does not, and the bound's notes say it was not checked."""
        return self.capacity_bytes is None or self.needed_bytes <= self.capacity_bytes


def does_not_fit(held: Residency) -> str | None:
    """The shortfall in one line, or None when the rank holds it all.

    A pin whose weights and KV cannot be resident describes either no deployment that ran or one
    that kept the rest in host memory (an engine that offloads layers or spills to system memory):
    either way the floor does not time the run, so the reader must hear it before any figure.
    """
    if held.fits:
        return None
    return (
        f"the weights ({held.weights_bytes / GIB:.1f} GiB) and KV cache ({held.kv_bytes / GIB:.1f} GiB) need "
        f"{held.needed_bytes / GIB:.1f} GiB per rank, more than the {held.capacity_bytes / GIB:.0f} GiB one device has: "
        "either the pin is wrong (precision, batch, context, layout or hardware) or what does not fit was kept in host "
        "memory, whose reads this floor does not count"
    )


def _stage_weights(spec: ModelSpec, workload: Workload, stage: int, layers: range) -> float:
    layout, prec = workload.layout, workload.precision
    w, e = bytes_per_element(prec.weights), bytes_per_element(prec.experts)
    d, tp = spec.hidden_size, layout.tp
    n_moe = len(spec.moe_layer_ids(layers))
    total = attention_weight_elements(spec, tp, layers) * w
    total += mlp_elements(d, spec.intermediate_size) / tp * (len(layers) - n_moe) * w
    total += norm_elements(spec, len(layers)) * bytes_per_element(prec.activations)
    if spec.moe and n_moe:
        m = spec.moe
        local_experts = m.num_experts / layout.ep * mlp_elements(d, m.expert_intermediate_size) / layout.moe_tp
        shared = mlp_elements(d, m.shared_intermediate_size) * m.num_shared_experts / tp
        total += (local_experts + shared) * n_moe * e + d * m.num_experts * n_moe * w
    if stage == 0:
        total += spec.vocab_size * d / tp * w  # the embedding table, vocabulary-parallel
    if stage == layout.pp - 1 and not (stage == 0 and spec.tie_word_embeddings):
        total += spec.vocab_size * d / tp * bytes_per_element(prec.head)
    return total


def _sequence_state(spec: ModelSpec, workload: Workload, share: SequenceShare, layers: range) -> float:
    """Bytes a share of the batch keeps over ``layers``: its KV cache, and each sequence's recurrent state in the
    linear-attention layers of a hybrid."""
    tp, prec = workload.layout.tp, workload.precision
    held = cached_token_layers(spec, share, layers) * attention_shard(spec, tp).kv_elements_per_token * bytes_per_element(prec.kv_cache)
    linear = linear_attention_shard(spec, tp)
    if linear:
        held += share.sequences * linear.state_elements_per_sequence * spec.linear_layers(layers) * bytes_per_element(prec.activations)
    return held


def residency(spec: ModelSpec, workload: Workload, hw: Hardware) -> Residency:
    """The fullest rank over the pipeline stages and the DP shares of the batch."""
    check_layout(spec, workload.layout)
    shares = [share for _, share in dp_shares(workload.context, workload.batch, workload.layout.dp, spec.sliding_window)]
    stages = [
        (_stage_weights(spec, workload, stage, layers), max(_sequence_state(spec, workload, share, layers) for share in shares))
        for stage, layers in enumerate(stage_layers(spec.num_layers, workload.layout.pp))
    ]
    fullest = max(stages, key=sum)
    return Residency(weights_bytes=fullest[0], kv_bytes=fullest[1], capacity_bytes=None if hw.memory_gib is None else hw.memory_gib * GIB)
