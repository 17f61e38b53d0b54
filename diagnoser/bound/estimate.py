"""The per-rank decode bound for a pinned workload.

A synchronized decode step is as slow as its slowest rank, so the floor is the maximum over
ranks of (bytes that rank moves) / (bandwidth), summed over pipeline stages because one
token's step passes every stage in turn. The compute floor is formed the same way from
FLOPs over tensor-core peak. Both are optimistic: they assume perfect overlap and full
bandwidth, and they leave out everything listed in ``EXCLUDED``.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from diagnoser.bound.capacity import Residency, does_not_fit, residency
from diagnoser.bound.experts import distinct_experts_per_rank, expected_distinct_experts, rows_per_touched_expert
from diagnoser.bound.floor import FloorResult, compare_with_observation
from diagnoser.bound.traffic import (
    attention_shard,
    attention_weight_elements,
    cached_token_layers,
    check_layout,
    mlp_elements,
    norm_elements,
    SequenceShare,
    dp_shares,
    linear_attention_shard,
    stage_layers,
)
from diagnoser.errors import InputError
from diagnoser.models.hardware import Hardware, hardware_preset, unlisted_device
from diagnoser.models.model_spec import ModelSpec, resolve_model
from diagnoser.models.precision import DType, bytes_per_element
from diagnoser.models.workload import Boundary, Context, Layout, Precision, Workload

COUNTED = [
    "attention weights (per-rank head shard; K/V projections replicated when TP > KV heads)",
    "dense MLP weights of the non-MoE layers",
    "shared-expert weights",
    "routed-expert weights: only the expected union of experts the group's tokens touch on this rank",
    "router weights",
    "norm weights",
    "embedding rows actually read (one per token)",
    "LM head (vocabulary shard)",
    "KV-cache reads for every sequence at its context (a sliding-window layer's at most its window), and the new token's KV write",
    "a linear-attention layer's recurrent state, read and rewritten for every sequence (at the activations' precision)",
    "named other state from the workload (other_state_bytes)",
]

EXCLUDED = [
    "kernel launch and CUDA-graph replay overhead",
    "host work: scheduling, batching, Python",
    "communication (TP all-reduce, EP all-to-all, PP send/recv)",
    "sampling and logits processing",
    "detokenization and streaming transport",
    "activation traffic between kernels and re-reads of weights or KV by split kernels",
    "bandwidth efficiency below the figure used",
]


# Said when the pin gives no context: the calculator's default of 0 would otherwise pass for a
# measured figure, and the floor comes out short by every cached token's read.
NO_CONTEXT = (
    "no context given: the floor counts no KV-cache read (every sequence's cached tokens are read each step), "
    "so it is low by those bytes; give workload.context, the mean tokens each sequence holds"
)
NO_PRECISION = (
    "no precision given: the floor assumes bf16 weights and KV cache, so a quantized model's floor is high by the bytes "
    "it does not move; give workload.precision (weights, kv_cache) as served"
)
NO_WEIGHT_FORMAT = (
    "no weight format given: the floor assumes bf16 weights, so a quantized model's floor is high by the bytes it does "
    "not move; give workload.precision.weights as served"
)
LACKING = {"workload.context": NO_CONTEXT, "workload.precision": NO_PRECISION}


def from_checkpoint(precision: Precision) -> str:
    """Said when the case names no weight format and the model's checkpoint states its own: a re-quantized copy
    moves other bytes."""
    formats = ", ".join(f"{part} {fmt.value}" for part, fmt in
                        (("weights", precision.weights), ("experts", precision.experts), ("output layer", precision.head)))
    return (f"no weight format given: the floor takes the published checkpoint's formats ({formats}); give "
            "workload.precision.weights when the served copy was quantized otherwise")


def unlisted(hw: Hardware) -> str:
    """Said when the device is known only by its bandwidth (measured, or the one figure its vendor publishes): what the
    floor could not count."""
    known = (f"is not a preset: the floor times its bytes at the measured {hw.memory_bandwidth_gbs:g} GB/s"
             if hw.bandwidth_is_measured else
             f"is a preset of its published bandwidth only: the floor times its bytes at {hw.memory_bandwidth_gbs:g} GB/s")
    return f"{hw.name!r} {known}, but its peak FLOP/s and memory size are unknown, so compute is not counted and the fit is not checked"


def peaks_missing(hw: Hardware, dtypes: list[str]) -> str:
    """Said when a listed device's datasheet gives no peak for a format the step multiplies in."""
    return (f"{hw.name!r} has no datasheet peak for {', '.join(dtypes)} arithmetic: those FLOPs are not timed, so the "
            "compute floor counts only the rest")


class RankEstimate(BaseModel):
    rank: int = Field(description="the first rank with these figures")
    ranks_alike: int = Field(default=1, ge=1, description="ranks of this stage with the same figures, this one included")
    stage: int
    components: dict[str, float]  # bytes per step
    bytes_total: float
    flops: float
    memory_ms: float
    compute_ms: float
    untimed_flops_dtypes: list[str] = Field(
        default_factory=list, description="formats whose arithmetic the device's datasheet gives no peak for: not in compute_ms"
    )
    routed_experts_touched_per_layer: float | None = None


class ExpertUnion(BaseModel):
    source: str  # "uniform routing" or "measured histogram"
    group_tokens: float
    local_experts: float
    touched_per_layer_busiest_rank: float
    touched_per_layer_if_active_params: float  # what "active parameters" implies: k per token, capped
    rows_per_touched_expert: float  # mean tokens per expert GEMM (skinny below ~16)
    expert_bytes_busiest_rank: float  # routed + shared expert bytes on the critical rank


class NaiveEstimate(BaseModel):
    """The spreadsheet's figure: active parameters x bytes, split evenly over every GPU."""

    active_parameters: float
    bytes_total: float
    bytes_per_rank: float
    floor_ms: float
    ratio_real_to_naive: float


class BoundReport(FloorResult):
    """The comparison fields come from ``FloorResult``; ``floor_ms`` is the memory-only floor and the
    ceiling is taken from ``step_floor_ms`` (memory or compute, whichever binds per stage)."""

    model: str
    hardware: str
    bandwidth_gbs: float
    bandwidth_is_measured: bool
    layout: Layout
    batch: int
    tokens_per_step: float
    mean_context: float
    per_rank: list[RankEstimate]
    critical_rank: int
    compute_floor_ms: float
    step_floor_ms: float
    expert_union: ExpertUnion | None = None
    naive: NaiveEstimate
    counts: list[str]
    excludes: list[str]
    memory: Residency = Field(description="weights and KV cache the fullest rank holds, against one device's memory")
    lacks: list[str] = Field(default_factory=list, description="inputs the pin did not give and the floor did without")
    notes: list[str] = Field(
        default_factory=list, description="what to settle before trusting the floor: a missing input, a pin that does not fit"
    )


class Histograms:
    """Measured tokens per routed expert, by MoE layer: one row for them all, or one row each."""

    def __init__(self, rows: list[list[int]], spec: ModelSpec, shared: bool) -> None:
        self._rows, self._spec, self._shared = rows, spec, shared

    def stage_rows(self, layers: range) -> list[tuple[list[int], int]]:
        """The rows of a stage's MoE layers, each with how many layers it stands for."""
        ids = self._spec.moe_layer_ids(layers)
        if self._shared:
            return [(self._rows[0], len(ids))] if ids else []
        everything = self._spec.moe_layer_ids(range(self._spec.num_layers))
        offset = (ids.start - everything.start) // everything.step if ids else 0
        return [(row, 1) for row in self._rows[offset : offset + len(ids)]]

    def all_rows(self) -> list[tuple[list[int], int]]:
        return self.stage_rows(range(self._spec.num_layers))


def _histograms(workload: Workload, spec: ModelSpec) -> Histograms | None:
    hist = workload.expert_token_histogram
    if hist is None:
        return None
    if not spec.moe:
        raise InputError("expert_token_histogram given for a model without routed experts")
    shared = not (hist and isinstance(hist[0], list))
    rows: list[list[int]] = [hist] if shared else hist  # type: ignore[list-item]
    if not shared and len(rows) != spec.moe_layers:
        raise InputError(f"expert_token_histogram has {len(rows)} layers; the model has {spec.moe_layers} MoE layers")
    for row in rows:
        if len(row) != spec.moe.num_experts or any(c < 0 for c in row):
            raise InputError(f"expert_token_histogram rows need {spec.moe.num_experts} non-negative counts")
    return Histograms(rows, spec, shared)


def _rank_estimate(
    spec: ModelSpec, workload: Workload, hw: Hardware, stage: int, layers: range, rank: int,
    share: SequenceShare, ep_index: int, histograms: Histograms | None,
) -> RankEstimate:
    layout, prec, q = workload.layout, workload.precision, workload.query_tokens_per_step
    w, e, kvb, act, head = (bytes_per_element(x) for x in (prec.weights, prec.experts, prec.kv_cache, prec.activations, prec.head))
    d, tp = spec.hidden_size, layout.tp
    tokens = share.sequences * q
    n_moe = len(spec.moe_layer_ids(layers))
    n_dense = len(layers) - n_moe
    attn, linear = attention_shard(spec, tp), linear_attention_shard(spec, tp)
    n_linear = spec.linear_layers(layers)
    comp: dict[str, float] = {}
    flops: dict[DType, float] = {}

    def add_flops(dtype: DType, value: float) -> None:
        flops[dtype] = flops.get(dtype, 0.0) + value

    attention = attention_weight_elements(spec, tp, layers)
    comp["attention_weights"] = attention * w
    add_flops(prec.weights, 2 * tokens * attention)
    if n_dense:
        comp["dense_mlp"] = mlp_elements(d, spec.intermediate_size) / tp * n_dense * w
    add_flops(prec.weights, 2 * tokens * mlp_elements(d, spec.intermediate_size) / tp * n_dense)
    read = cached_token_layers(spec, share, layers)
    comp["kv_cache_read"] = read * attn.kv_elements_per_token * kvb
    comp["kv_cache_write"] = tokens * attn.kv_elements_per_token * (len(layers) - n_linear) * kvb
    add_flops(prec.activations, q * read * attn.score_flops_per_context_token)
    if linear and n_linear:  # read and rewritten once a step, at the activations' precision
        comp["recurrent_state"] = 2 * share.sequences * linear.state_elements_per_sequence * n_linear * act
        add_flops(prec.activations, tokens * linear.flops_per_token * n_linear)
    comp["norms"] = norm_elements(spec, len(layers)) * act
    touched_per_layer = None
    if spec.moe and n_moe:
        m = spec.moe
        shared = mlp_elements(d, m.shared_intermediate_size) * m.num_shared_experts / tp
        if shared:
            comp["shared_experts"] = shared * n_moe * e
            add_flops(prec.experts, 2 * tokens * shared * n_moe)
        comp["router"] = d * m.num_experts * n_moe * w
        expert = mlp_elements(d, m.expert_intermediate_size) / layout.moe_tp
        group_tokens = (workload.batch * q) if _spans_group(layout) else tokens
        local = m.num_experts / layout.ep
        if histograms is None:
            touched_per_layer = expected_distinct_experts(m.num_experts, m.top_k, group_tokens, local)
            touched = touched_per_layer * n_moe
            routed_tokens = group_tokens * m.top_k / layout.ep * n_moe
        else:
            width = m.num_experts // layout.ep
            rows = histograms.stage_rows(layers)
            touched = sum(distinct_experts_per_rank(row, layout.ep)[ep_index] * n for row, n in rows)
            routed_tokens = sum(sum(row[ep_index * width : (ep_index + 1) * width]) * n for row, n in rows)
            touched_per_layer = touched / n_moe
        comp["routed_experts"] = touched * expert * e
        add_flops(prec.experts, 2 * routed_tokens * expert)
    if stage == 0:
        comp["embedding_rows"] = tokens * d * w
    if stage == layout.pp - 1:
        comp["norms"] += d * act  # final norm before the LM head
        comp["lm_head"] = spec.vocab_size * d / tp * head
        add_flops(prec.head, 2 * tokens * spec.vocab_size * d / tp)
    for name, value in workload.other_state_bytes.items():
        comp[f"other:{name}"] = value
    total = sum(comp.values())
    # a format the device's datasheet gives no peak for: its arithmetic is not timed (and the report says so)
    peaks = {dtype: hw.peak_flops(dtype) for dtype in flops}
    compute_ms = sum(value / peaks[dtype] for dtype, value in flops.items() if peaks[dtype]) * 1e3
    untimed = sorted(DType(dtype).value for dtype, value in flops.items() if value and peaks[dtype] is None)
    return RankEstimate(
        rank=rank + stage * layout.tp * layout.dp,
        stage=stage,
        components=comp,
        bytes_total=total,
        flops=sum(flops.values()),
        memory_ms=total / (hw.memory_bandwidth_gbs * 1e9) * 1e3,
        compute_ms=compute_ms,
        untimed_flops_dtypes=untimed,
        routed_experts_touched_per_layer=touched_per_layer,
    )


def _spans_group(layout: Layout) -> bool:
    """Experts spread over the whole group (EP x expert-TP = TP x DP), not inside each DP rank."""
    return layout.ep * layout.moe_tp == layout.tp * layout.dp


def _stage_estimates(
    spec: ModelSpec, workload: Workload, hw: Hardware, stage: int, layers: range, histograms: Histograms | None
) -> list[RankEstimate]:
    """One estimate per distinct rank of a stage, with how many ranks share it.

    Ranks differ only in their share of the sequences and, with a measured histogram, in their
    experts; everything else is symmetric. So work follows the distinct cases, never the rank
    count a user typed: 65,536 ranks at a mean context are one estimate.
    """
    layout = workload.layout
    tp, moe_tp = layout.tp, layout.moe_tp
    computed: dict[tuple[SequenceShare, int], RankEstimate] = {}
    alike: dict[tuple, RankEstimate] = {}  # by figures: ranks with other experts may still move the same bytes

    def add(rank: int, count: int, share: SequenceShare, ep_index: int) -> None:
        if (share, ep_index) not in computed:
            computed[share, ep_index] = _rank_estimate(spec, workload, hw, stage, layers, rank, share, ep_index, histograms)
        estimate = computed[share, ep_index]
        figures = (tuple(estimate.components.items()), estimate.flops, estimate.routed_experts_touched_per_layer)
        known = alike.get(figures)
        if known is None:
            alike[figures] = estimate.model_copy(update={"rank": rank + stage * tp * layout.dp, "ranks_alike": count})
        else:
            alike[figures] = known.model_copy(update={"ranks_alike": known.ranks_alike + count})

    for dp_ranks, share in dp_shares(workload.context, workload.batch, layout.dp, spec.sliding_window):
        if histograms is None:
            add(dp_ranks[0] * tp, len(dp_ranks) * tp, share, 0)
        elif _spans_group(layout):  # ep x expert_tp = tp x dp: bounded by the experts the histogram lists
            for dp_index in dp_ranks:
                for rank in range(dp_index * tp, (dp_index + 1) * tp):
                    add(rank, 1, share, rank // moe_tp)
        else:  # each DP rank holds every expert group: the DP ranks repeat one pattern
            for local in range(tp):
                add(dp_ranks[0] * tp + local, len(dp_ranks), share, local // moe_tp)
    return list(alike.values())


def active_parameters(spec: ModelSpec) -> float:
    """Parameters one token uses: what a spreadsheet multiplies by bytes per parameter."""
    attn = attention_weight_elements(spec, 1, range(spec.num_layers))
    dense = mlp_elements(spec.hidden_size, spec.intermediate_size) * spec.dense_mlp_layers
    moe = 0.0
    if spec.moe:
        m = spec.moe
        per_layer = mlp_elements(spec.hidden_size, m.expert_intermediate_size) * m.top_k
        per_layer += mlp_elements(spec.hidden_size, m.shared_intermediate_size) * m.num_shared_experts
        moe = per_layer * spec.moe_layers
    # published "active" counts include the embedding table, although decode reads one row of it
    embedding_and_head = spec.vocab_size * spec.hidden_size * (1 if spec.tie_word_embeddings else 2)
    return attn + dense + moe + embedding_and_head


def resolve_hardware(workload: Workload, hardware: Hardware | None = None) -> Hardware:
    if hardware is None and workload.hardware is None:
        raise InputError("no hardware: name a preset or the GPU as nvidia-smi prints it")
    if hardware is None and workload.measured_bandwidth_gbs:
        try:
            hardware_preset(workload.hardware)
        except InputError:
            return unlisted_device(workload.hardware, workload.measured_bandwidth_gbs)
    hw = hardware or hardware_preset(workload.hardware)
    if workload.measured_bandwidth_gbs:
        hw = hw.with_measured_bandwidth(workload.measured_bandwidth_gbs)
    return hw


def with_checkpoint_weights(stored: Precision, workload: Workload) -> Precision:
    """The checkpoint's weight formats with the formats the workload states for the rest: a case that names only its
    KV cache's format (fp8) still serves the weights as the checkpoint stores them (gpt-oss's MXFP4 experts), not
    the bf16 the schema assumes where nothing is said."""
    return stored.model_copy(update={name: getattr(workload.precision, name) for name in workload.precision.model_fields_set})


def compute_bound(workload: Workload, hardware: Hardware | None = None) -> BoundReport:
    if workload.model is None:
        raise InputError("no model: name a preset, a config.json, or give the dimensions inline")
    spec = resolve_model(workload.model)
    weights_stated = "weights" in workload.precision.model_fields_set
    checkpoint_formats = spec.checkpoint_precision is not None and not weights_stated
    if checkpoint_formats:  # the copy's precision counts as given: it is the checkpoint's, not an assumption
        workload = workload.model_copy(update={"precision": with_checkpoint_weights(spec.checkpoint_precision, workload)})
    hw = resolve_hardware(workload, hardware)
    layout = workload.layout
    check_layout(spec, layout)
    histograms = _histograms(workload, spec)
    ranks: list[RankEstimate] = []
    floor = compute_floor = step_floor = 0.0
    for stage, layers in enumerate(stage_layers(spec.num_layers, layout.pp)):
        stage_ranks = _stage_estimates(spec, workload, hw, stage, layers, histograms)
        ranks.extend(stage_ranks)
        floor += max(r.memory_ms for r in stage_ranks)
        compute_floor += max(r.compute_ms for r in stage_ranks)
        step_floor += max(max(r.memory_ms, r.compute_ms) for r in stage_ranks)
    if not (0 < step_floor < math.inf):
        raise InputError(
            f"the workload gives a step floor of {step_floor:.3g} ms, which no real step has: "
            "check bandwidth, precision and sizes for values far too small or too large"
        )
    critical = max(ranks, key=lambda r: (r.memory_ms, -r.rank))
    observed = workload.observed
    compared = compare_with_observation(
        step_floor,
        batch=workload.batch,
        tokens_per_step=workload.tokens_per_step,
        observed_step_ms=observed.step_ms if observed else None,
        observed_tokens_per_s=observed.tokens_per_s if observed else None,
        boundary=observed.boundary if observed else Boundary.device_step,
    )
    naive = _naive(spec, workload, hw, critical.bytes_total)
    held = residency(spec, workload, hw)
    lacks = ([] if workload.context_given else ["workload.context"]) + ([] if weights_stated or checkpoint_formats else ["workload.precision"])
    shortfall = does_not_fit(held)
    untimed = sorted({d for r in ranks for d in r.untimed_flops_dtypes})
    said = [NO_WEIGHT_FORMAT if name == "workload.precision" and workload.precision_given else LACKING[name] for name in lacks]
    notes = (said + ([from_checkpoint(workload.precision)] if checkpoint_formats else [])
             + ([shortfall] if shortfall else []) + ([] if hw.listed else [unlisted(hw)])
             + ([peaks_missing(hw, untimed)] if untimed and hw.listed else []))
    return BoundReport(
        **compared.model_dump(exclude={"floor_ms", "sanity"}),
        model=spec.name,
        hardware=hw.name,
        bandwidth_gbs=hw.memory_bandwidth_gbs,
        bandwidth_is_measured=hw.bandwidth_is_measured,
        layout=layout,
        batch=workload.batch,
        tokens_per_step=workload.tokens_per_step,
        mean_context=workload.mean_context,
        per_rank=ranks,
        critical_rank=critical.rank,
        floor_ms=floor,
        compute_floor_ms=compute_floor,
        step_floor_ms=step_floor,
        expert_union=_union(spec, workload, critical, histograms),
        naive=naive,
        counts=COUNTED,
        excludes=EXCLUDED,
        memory=held,
        lacks=lacks,
        notes=notes,
        sanity=_sanity(workload, hw, floor, compute_floor, naive, layout) + compared.sanity,
    )


def _union(
    spec: ModelSpec, workload: Workload, critical: RankEstimate, histograms: Histograms | None
) -> ExpertUnion | None:
    if not spec.moe or critical.routed_experts_touched_per_layer is None:
        return None
    layout, m = workload.layout, spec.moe
    tokens = workload.batch * workload.query_tokens_per_step / (1 if _spans_group(layout) else layout.dp)
    local = m.num_experts / layout.ep
    if histograms:
        weighted = histograms.all_rows()
        rows = sum(sum(h) / max(1, sum(1 for c in h if c)) * n for h, n in weighted) / sum(n for _, n in weighted)
    else:
        rows = rows_per_touched_expert(m.num_experts, m.top_k, tokens)
    return ExpertUnion(
        source="measured histogram" if histograms else "uniform routing (an upper bound: skewed routing touches fewer)",
        rows_per_touched_expert=rows,
        expert_bytes_busiest_rank=critical.components.get("routed_experts", 0.0) + critical.components.get("shared_experts", 0.0),
        group_tokens=tokens,
        local_experts=local,
        touched_per_layer_busiest_rank=critical.routed_experts_touched_per_layer,
        touched_per_layer_if_active_params=min(m.top_k, local),
    )


def _naive(spec: ModelSpec, workload: Workload, hw: Hardware, real_rank_bytes: float) -> NaiveEstimate:
    params = active_parameters(spec)
    total = params * bytes_per_element(workload.precision.weights)
    per_rank = total / workload.layout.world_size
    return NaiveEstimate(
        active_parameters=params,
        bytes_total=total,
        bytes_per_rank=per_rank,
        floor_ms=per_rank / (hw.memory_bandwidth_gbs * 1e9) * 1e3,
        ratio_real_to_naive=real_rank_bytes / per_rank,
    )


def _sanity(workload: Workload, hw: Hardware, floor: float, compute_floor: float, naive: NaiveEstimate, layout: Layout) -> list[str]:
    lines = []
    if not hw.bandwidth_is_measured:
        lines.append(
            f"bandwidth is the datasheet {hw.memory_bandwidth_gbs:.0f} GB/s; tuned kernels reach roughly 85-92% of it: "
            "run `diagnoser probe --only bandwidth` and pass measured_bandwidth_gbs"
        )
    if compute_floor > floor:
        lines.append(f"compute, not memory, sets the floor at this batch ({compute_floor:.3g} ms vs {floor:.3g} ms)")
    ratio = naive.ratio_real_to_naive
    if abs(ratio - 1) > 0.1:
        lines.append(
            f"the busiest rank moves {ratio:.2f}x the bytes that 'active parameters x bytes / GPUs' suggests: "
            "active parameters are an input to traffic, not a measure of it"
        )
    if layout.pp > 1:
        lines.append(f"PP={layout.pp}: the floor sums the stages (one token passes them in turn); "
                     "with micro-batches in flight the step interval can approach the slowest stage")
    return lines


def _critical_rank_bytes(workload: Workload) -> RankEstimate:
    """The busiest rank's bytes per step, as the bound counts them. Bytes do not depend on the GPU, so any
    preset stands in when the case names none; only byte figures of the result are meaningful then."""
    from diagnoser.models.hardware import hardware_presets

    hw = None
    if workload.hardware is None or workload.hardware.lower() not in hardware_presets():
        hw = next(iter(hardware_presets().values()))
    report = compute_bound(workload.model_copy(update={"observed": None}), hw)
    return next(r for r in report.per_rank if r.rank == report.critical_rank)


def bytes_growth(workload: Workload, context_lo: float, context_hi: float) -> float:
    """How much the busiest rank's bytes per step grow between two contexts, as the bound counts them.

    A step that grows much faster than this with context spends the extra time on something other
    than reading the longer KV cache.
    """
    lo, hi = (_critical_rank_bytes(workload.model_copy(update={"context": Context(mean=c)})) for c in (context_lo, context_hi))
    return hi.bytes_total / lo.bytes_total


def kv_read_share(workload: Workload) -> float:
    """The KV cache read's share of the busiest rank's bytes per step. A decode step is memory-bound, so its
    kernels read at about one bandwidth and attention's share of the step's time should be near this share
    of its bytes; a share of the time several times larger is attention reading slower than the GEMMs do."""
    rank = _critical_rank_bytes(workload)
    return rank.components["kv_cache_read"] / rank.bytes_total
