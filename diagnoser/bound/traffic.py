"""Bytes and FLOPs one rank must handle in one decode step, component by component.

Each function answers for one rank and one pipeline stage. Parameters are counted in
elements and converted to bytes with the component's own storage format, so fp8 experts
next to bf16 attention are charged correctly. Sharding follows the usual serving layouts:
attention heads and dense MLPs split by TP (K/V projections and cache replicated once TP
exceeds the KV heads), MLA's latent cache replicated on every TP rank, experts split by EP
and then by the expert-TP degree.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnoser.errors import InputError
from diagnoser.models.model_spec import ModelSpec
from diagnoser.models.workload import Context, Layout


@dataclass(frozen=True)
class AttentionShard:
    """Per-rank attention parameters (elements) and KV-cache elements per cached token per layer."""

    weight_elements: float
    kv_elements_per_token: float
    score_flops_per_context_token: float  # per query token per layer


@dataclass(frozen=True)
class LinearShard:
    """Per-rank parameters (elements) of one Gated DeltaNet layer, the state it keeps for each sequence (the
    recurrent matrix of every value head and the convolution's last inputs) and the FLOPs a token spends on it."""

    weight_elements: float
    state_elements_per_sequence: float
    flops_per_token: float


def check_layout(spec: ModelSpec, layout: Layout) -> None:
    """Reject layouts no serving engine can run, with the reason in one line."""
    heads, kv, tp = spec.num_attention_heads, spec.num_kv_heads, layout.tp
    if heads % tp:
        raise InputError(f"TP={tp} does not divide num_attention_heads={heads}")
    linear = spec.linear_attention
    if linear and (linear.num_key_heads % tp or linear.num_value_heads % tp):
        raise InputError(f"TP={tp} does not divide the linear-attention heads ({linear.num_key_heads} key, "
                         f"{linear.num_value_heads} value)")
    if spec.mla is None and kv % tp and tp % kv:
        raise InputError(f"TP={tp} and num_kv_heads={kv}: one must divide the other")
    if spec.num_layers < layout.pp:
        raise InputError(f"PP={layout.pp} exceeds num_layers={spec.num_layers}")
    if spec.moe:
        ranks = layout.tp * layout.dp
        group = layout.ep * layout.moe_tp
        if group not in (ranks, layout.tp):
            raise InputError(
                f"expert layout ep={layout.ep} x expert_tp={layout.moe_tp} must cover tp*dp={ranks} ranks "
                f"(experts spread over the group) or tp={layout.tp} (experts inside each DP rank)"
            )
        if spec.moe.num_experts % layout.ep:
            raise InputError(f"EP={layout.ep} does not divide num_experts={spec.moe.num_experts}")
        if spec.moe.expert_intermediate_size % layout.moe_tp:
            raise InputError(f"expert TP={layout.moe_tp} does not divide expert width {spec.moe.expert_intermediate_size}")


def attention_shard(spec: ModelSpec, tp: int) -> AttentionShard:
    d, heads = spec.hidden_size, spec.num_attention_heads // tp
    if spec.mla is None:
        hd = spec.head_dim
        kv_heads = max(spec.num_kv_heads // tp, 1)  # replicated when TP > KV heads
        weights = d * heads * hd * (3 if spec.attention_output_gate else 2) + 2 * d * kv_heads * hd
        if spec.attention_bias:
            weights += (heads + 2 * kv_heads) * hd
        return AttentionShard(weights, 2 * kv_heads * hd, 4 * heads * hd)
    m = spec.mla
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    q = d * m.q_lora_rank + m.q_lora_rank * heads * qk if m.q_lora_rank else d * heads * qk
    weights = (
        q
        + d * (m.kv_lora_rank + m.qk_rope_head_dim)  # latent down-projection, replicated
        + m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
        + heads * m.v_head_dim * d
    )
    latent = m.kv_lora_rank + m.qk_rope_head_dim  # one latent per token, not split by TP
    # absorbed MLA decode: scores over (latent + rope) and values over the latent, per head
    return AttentionShard(weights, latent, 2 * heads * (latent + m.kv_lora_rank))


def linear_attention_shard(spec: ModelSpec, tp: int) -> LinearShard | None:
    """One Gated DeltaNet layer on one rank, heads split by TP: the input projection to queries and keys (key heads),
    values and output gates (value heads), the per-head decay and beta inputs, the causal convolution over queries,
    keys and values, the output projection, and the decay and bias vectors and gated norm. Its state is each value
    head's key_dim x value_dim matrix plus the convolution's last kernel-1 inputs; a token reads and rewrites the
    matrix, a few multiply-adds per element (decay, delta update, readout)."""
    linear = spec.linear_attention
    if linear is None:
        return None
    d = spec.hidden_size
    key_heads, value_heads = linear.num_key_heads // tp, linear.num_value_heads // tp
    keys, values = key_heads * linear.key_head_dim, value_heads * linear.value_head_dim
    mixed = 2 * keys + values  # the channels the convolution runs over
    weights = (d * (2 * keys + 2 * values) + d * 2 * value_heads + mixed * linear.conv_kernel + values * d
               + 2 * value_heads + linear.value_head_dim)
    matrix = value_heads * linear.key_head_dim * linear.value_head_dim
    return LinearShard(weights, matrix + mixed * (linear.conv_kernel - 1), 6 * matrix + 2 * mixed * linear.conv_kernel)


def attention_weight_elements(spec: ModelSpec, tp: int, layers: range) -> float:
    """Attention parameters of ``layers`` on one rank: softmax-attention layers and, in a hybrid, linear ones."""
    linear = spec.linear_layers(layers)
    shard = linear_attention_shard(spec, tp)
    return attention_shard(spec, tp).weight_elements * (len(layers) - linear) + (shard.weight_elements * linear if shard else 0.0)


def norm_elements(spec: ModelSpec, layers: int) -> float:
    per_layer = 2 * spec.hidden_size
    if spec.mla is not None:
        per_layer += (spec.mla.q_lora_rank or 0) + spec.mla.kv_lora_rank
    return per_layer * layers


def mlp_elements(hidden: int, width: int) -> float:
    """Gated MLP (gate, up, down projections)."""
    return 3.0 * hidden * width


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """Contiguous layer ranges per pipeline stage, the earlier stages taking the remainder."""
    base, extra = divmod(num_layers, pp)
    out, start = [], 0
    for stage in range(pp):
        size = base + (1 if stage < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


@dataclass(frozen=True)
class SequenceShare:
    """The sequences one DP rank decodes: how many, their context tokens together, and the tokens a sliding-window
    layer reads of them (each sequence's context capped at the window)."""

    sequences: int
    context_tokens: float
    windowed_tokens: float


def cached_token_layers(spec: ModelSpec, share: SequenceShare, layers: range) -> float:
    """Cached tokens over ``layers`` that one step reads for a share of the batch (and that its cache holds): every
    context token in a full-attention layer, at most the window of each sequence in a sliding-window one, none in a
    linear-attention layer (its fixed state is counted apart)."""
    windowed = spec.windowed_layers(layers)
    full = len(layers) - windowed - spec.linear_layers(layers)
    return share.context_tokens * full + share.windowed_tokens * windowed


def dp_shares(context: Context, batch: int, dp: int, window: int | None = None) -> list[tuple[range | list[int], SequenceShare]]:
    """Each distinct share of the batch with the DP ranks that hold it.

    Sequences go to DP ranks in contiguous equal chunks (batch is a multiple of ``dp``). A mean
    context gives every rank the same share, in closed form, so a batch of 1e12 costs nothing;
    per-sequence lengths are as many as the file lists, so walking them is bounded by its size.
    """
    per_rank = batch // dp
    cap = (lambda tokens: min(tokens, window)) if window else (lambda tokens: tokens)
    if context.per_sequence is None:
        mean = float(context.mean or 0.0)
        return [(range(dp), SequenceShare(per_rank, mean * per_rank, cap(mean) * per_rank))]
    holders: dict[SequenceShare, list[int]] = {}
    lengths = context.per_sequence
    for index in range(dp):
        mine = lengths[index * per_rank : (index + 1) * per_rank]
        share = SequenceShare(per_rank, float(sum(mine)), float(sum(cap(n) for n in mine)))
        holders.setdefault(share, []).append(index)
    return [(ranks, share) for share, ranks in holders.items()]
