"""What each case field is for: read by the rules (or the bound), an alternative way of stating a
canonical fact, or informational (kept for the reader, named here with why no rule reads it).

``diagnoser schema case`` prints these roles as ``x-field-roles``; a test walks the schema and
holds every field to one of them, so a field nobody reads is a decision, not an accident.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator

from pydantic import BaseModel

from diagnoser.engine.canonical import EQUIVALENCES

INFORMATIONAL: dict[str, str] = {
    "schema_version": "the document's format",
    "sources": "where each fact was read; shown in reports",
    "workload.precision.expert_weights": "read through the precision section as a whole by the bound",
    "bound_inputs.predicted_tokens_per_s": "the quoted bound's promise, shown beside the recomputed one",
    "observations.budget.step_spread_ms": "how steady the profiled steps were; shown with the budget",
    "observations.rank_budgets.step_spread_ms": "how steady each rank's steps were; shown with the budget",
    "observations.kernel_classes.achieved_flops_fraction": "decode is bandwidth-bound; the rules judge kernels by bandwidth",
    "observations.graph.kernel_launches_per_step": "a trace's count, shown; launch cost is judged from the budget's launch time",
    "observations.graph.graph_launches_per_step": "a trace's count, shown; replay is judged from status and replayed_at_live_batch",
    "observations.graph.eager_step_ms": "the graph probe's eager step; shown beside the replayed one",
    "observations.graph.graph_step_ms": "the graph probe's replayed step; shown beside the eager one",
    "observations.collectives.effective_bandwidth_gbs": "shown; the transfer time it comes from is what the rules read",
    "observations.collectives.group_size": "shown with the collective",
    "observations.collectives.preceding_compute_ms": "shown; the late rank's wait is what the rules read",
    "observations.boundaries.ttft_ms": "first-token time is prefill and queueing, not decode; queueing reads the metrics' TTFT",
    "observations.probe.gpu_name": "names the device; the bound's hardware is pinned in the workload",
    "observations.probe.theoretical_bandwidth_gbs": "the datasheet figure; the bound uses the hardware preset or the measured bandwidth",
    "observations.probe.pcie_generation": "shown; host-to-device time is judged from the budget's copies",
    "observations.server.engine_version": "names the build; versions are compared as a run setting (engine_version)",
    "observations.server.streaming_proxy": "names the proxy; buffering is judged from the boundary timings",
    "observations.server.lora_adapters": "shown; no rule yet separates LoRA cost",
    "observations.server.structured_output_backend": "names the grammar engine; its cost is judged with structured_output",
    "observations.server.kv_cache_tokens": "shown; KV pressure is judged from usage, waiting requests and preemptions",
    "observations.server.kv_cache_dtype": "shown; the bound's KV precision is pinned in the workload",
    "observations.server.prefix_caching": "shown; no rule yet judges prefix-cache hits",
    "observations.server.multimodal": "shown; no rule yet separates encoder work",
    "observations.metrics.requests_per_s": "shown; the rules compare per-token times and token rates",
    "observations.metrics.output_tokens": "shown; output length is compared as a run setting (output_tokens)",
    "observations.runs.figures.ttft_ms": "shown; runs are compared on decode figures, not on prefill",
    "observations.runs.figures.host_ms_per_step": "shown with the run",
    "observations.runs.repeats": "read as the run's repeat_spread: (highest - lowest) / lowest of the repeats",
    "observations.routing.active_experts_per_step": "shown; the bound's expected expert union is computed from the model",
    "observations.platform.os": "names the system",
    "observations.step_mix.prefill_steps": "shown; interference is judged from the mixed steps",
}
# Percentiles the rules do not compare (they read medians and the p99 tail), for every latency.
INFORMATIONAL_SUFFIXES = {".p90": "shown; the rules compare the median and the p99 tail"}


def _models(annotation: typing.Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def leaf_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every field of ``model`` that holds a value rather than a section, as a dotted path."""
    for name, field in model.model_fields.items():
        inner = _models(field.annotation)
        if inner:
            for sub in inner:
                yield from leaf_paths(sub, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}"


def role(path: str) -> str:
    feeds = [eq.canonical for eq in EQUIVALENCES for alt in eq.alternatives if path == alt.path]
    if feeds:
        return "feeds " + ", ".join(feeds)
    if path in INFORMATIONAL:
        return "informational: " + INFORMATIONAL[path]
    suffix = next((s for s in INFORMATIONAL_SUFFIXES if path.endswith(s)), None)
    if suffix is not None:
        return "informational: " + INFORMATIONAL_SUFFIXES[suffix]
    return "read by the rules or the bound"


def roles(model: type[BaseModel]) -> dict[str, str]:
    return {path: role(path) for path in dict.fromkeys(leaf_paths(model))}
