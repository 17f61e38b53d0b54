"""Evidence engineers have without a trace: serving metrics, the figure they were promised, and runs.

Real incident reports rarely hold a critical-path budget. They hold a benchmark's TPOT and
tokens/s, the number someone expected, and A/B runs between versions or settings. These
models carry that evidence with the boundary each figure was read at, so the rules can say
what the figures support and what they cannot be compared with.
"""

from __future__ import annotations

import re
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from diagnoser.models.runtime import Growth
from diagnoser.models.units import Positive, TokenRate


class _Obs(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class MetricBoundary(str, Enum):
    """Where a serving figure was read. ``unknown`` is allowed: the guards then say what cannot be compared."""

    device_step = "device_step"  # GPU time of a decode step (profiler, CUDA events)
    engine = "engine"  # the engine's own counters (scheduler throughput, llama_print_timings eval)
    server_emission = "server_emission"  # tokens leaving the server
    client_receipt = "client_receipt"  # a benchmark client or the user's stopwatch
    unknown = "unknown"


# Boundaries that time a request from its arrival at the server (its counters, its emission)...
SERVER_CLOCKS = frozenset({MetricBoundary.engine.value, MetricBoundary.server_emission.value})
# ...and every boundary on the engine's side of the transport: their per-token figures are the server's.
ENGINE_SIDE = SERVER_CLOCKS | {MetricBoundary.device_step.value}


class RateKind(str, Enum):
    """A tokens/s figure over all streams together, or for one stream."""

    aggregate = "aggregate"
    per_user = "per_user"
    unknown = "unknown"


class Percentiles(_Obs):
    """One latency figure at the percentiles that were reported, in ms."""

    mean: Positive | None = Field(default=None, description="mean, ms")
    p50: Positive | None = Field(default=None, description="median, ms")
    p90: Positive | None = Field(default=None, description="90th percentile, ms")
    p99: Positive | None = Field(default=None, description="99th percentile, ms")

    @property
    def typical(self) -> float | None:
        """The median where reported, else the mean: the figure a per-token time is read from."""
        return self.p50 if self.p50 is not None else self.mean


class ServingMetrics(_Obs):
    """What the benchmark or the server reported for the slow configuration."""

    boundary: MetricBoundary = Field(default=MetricBoundary.unknown, description="where the figures were read")
    output_tokens_per_s: TokenRate | None = Field(default=None, description="aggregate output tokens/s over all streams")
    per_user_tokens_per_s: TokenRate | None = Field(default=None, description="output tokens/s of one stream")
    tpot_ms: Percentiles | None = Field(default=None, description="time per output token after the first, per request")
    itl_ms: Percentiles | None = Field(default=None, description="gap between consecutive chunks a client received")
    ttft_ms: Percentiles | None = Field(default=None, description="time to first token")
    request_latency_ms: Percentiles | None = Field(default=None, description="end-to-end request latency")
    queue_ms: Percentiles | None = Field(default=None, description="time a request waited to be scheduled (part of its TTFT)")
    prefill_ms: Percentiles | None = Field(default=None, description="time from first scheduled to first token")
    waiting_requests: float | None = Field(default=None, ge=0, description="requests waiting to be admitted, most seen in the window")
    concurrency: Positive | None = Field(default=None, description="requests in flight (client side)")
    running_sequences: Positive | None = Field(default=None, description="sequences the engine decoded together")
    requests_per_s: Positive | None = Field(default=None, description="completed requests per second")
    duration_s: Positive | None = Field(default=None, description="wall time of a fixed job (a drain, a benchmark)")
    input_tokens: float | None = Field(default=None, ge=0, description="prompt tokens per request")
    output_tokens: float | None = Field(default=None, ge=1, description="generated tokens per request")
    tokens_per_chunk: Positive | None = Field(default=None, description="tokens per streamed chunk (speculation emits several)")
    rate_includes_prefill: bool | None = Field(
        default=None, description="the tokens/s divides total time, prompt processing (TTFT) included"
    )
    window_includes_warmup: bool | None = Field(
        default=None, description="the timed window includes warm-up (compilation, graph capture, first requests)"
    )
    per_token_grows_with: list[Growth] = Field(
        default_factory=list, description="what the per-token time is reported to grow with, when no sweep gives figures"
    )

    def per_token_ms(self) -> float | None:
        """The per-token decode interval of one stream, from the most direct figure reported."""
        for figure in (self.tpot_ms, self.itl_ms):
            if figure is not None and figure.typical is not None:
                return figure.typical
        if self.per_user_tokens_per_s is not None:
            return 1e3 / self.per_user_tokens_per_s
        return None


class ExpectedKind(str, Enum):
    """What the slow figure was compared with; each kind supports different conclusions."""

    analytic_bound = "analytic_bound"  # bytes over bandwidth, a spreadsheet
    older_version = "older_version"  # the same setup on an earlier release or commit
    earlier_in_run = "earlier_in_run"  # the same setup, nothing changed, earlier in the same session or uptime
    other_engine = "other_engine"
    other_config = "other_config"  # the same engine with another setting (not the fix)
    other_hardware = "other_hardware"
    vendor_claim = "vendor_claim"  # a published or quoted figure


class Expected(_Obs):
    """The figure the slow run was held against, with what it measures."""

    kind: ExpectedKind = Field(description="what kind of reference the figure is; each supports different conclusions")
    output_tokens_per_s: TokenRate | None = Field(default=None, description="expected aggregate tokens/s")
    per_user_tokens_per_s: TokenRate | None = Field(default=None, description="expected tokens/s of one stream")
    per_token_ms: Positive | None = Field(default=None, description="expected TPOT or step time per token")
    duration_s: Positive | None = Field(default=None, description="expected wall time of the same fixed job")
    window_includes_warmup: bool | None = Field(
        default=None, description="the reference's timed window holds a warm-up too (false: it was read after one)"
    )
    rate: RateKind = Field(default=RateKind.unknown, description="whether the expected tokens/s is aggregate or per stream")
    boundary: MetricBoundary = Field(default=MetricBoundary.unknown, description="where the expected figure was read")
    concurrency: Positive | None = Field(default=None, description="streams the expected figure was measured at")
    note: str = Field(default="", description="where the figure comes from")


# Setting names the rules interpret; any other name is compared as an opaque setting.
KNOWN_SETTINGS = {
    "engine_version": "release, commit or build of the serving engine",
    "build": "how the same engine version was built or packaged (release binaries, a source build, a wrapper's preset, debug)",
    "cuda_graphs": "graph capture on (true) or off (false)",
    "async_scheduling": "the host schedules the next step while the device runs this one (true) or after it (false)",
    "context": "tokens already in each sequence's context",
    "input_tokens": "prompt tokens per request",
    "output_tokens": "generated tokens per request",
    "concurrency": "requests in flight",
    "batch": "sequences decoding together",
    "max_num_seqs": "sequences the scheduler admits at once: a cap, which the load may or may not reach",
    "draft_length": "speculative draft tokens per cycle",
    "speculative": "speculative decoding on (true) or off (false)",
    "max_context": "configured maximum context length",
    "kernel_backend": "GEMM or MoE kernel family",
    "kv_cache_capacity": "KV-cache space allocated (tokens, blocks, GB or a memory fraction)",
    "tp": "tensor-parallel ranks",
    "split_mode": "how a model spans several devices: tensor or row (each layer's matmuls split, collectives every layer) "
    "against layer (whole layers per device, activations passed once per device)",
    "pp": "pipeline stages",
    "devices": "devices one copy of the model is spread over, however it is split (tensor, pipeline or an engine's layer "
    "split); a hardware written with its count (4x A100) states it too",
    "interconnect": "how the devices are linked (nvlink, pcie, none), or the collective transport over the link (nccl, "
    "gloo, ring over TCP, RDMA): nothing to compare on one device",
    "ep": "expert-parallel ranks",
    "attention_backend": "attention kernel family",
    "quantization": "weight format",
    "kv_cache_dtype": "storage format of the KV cache, its bits per element as its name states them (f16, fp8, q8_0, q4_0)",
    "moe_config": "the fused-MoE kernel's tuned config for this GPU, shape and dtype (none or default: the engine's untuned fallback)",
    "sampling": "sampling parameters or sampler",
    "penalties": "repetition/frequency/presence penalties on",
    "structured_output": "grammar- or schema-constrained decoding on",
    "lora": "LoRA adapters served",
    "threads": "CPU threads of the engine",
    "cpu_affinity": "the cores the engine's threads may run on (all cores, or a set: P-cores only, one socket, a core list)",
    "gpu_layers": "model layers placed on the device (the rest run from host memory)",
    "kv_cache_placement": "where the KV cache is held: device (the accelerator's memory) or host (host memory, read by "
    "the CPU or over the link)",
    "device_memory": "memory of the device the model runs on (16, 24 GB; a SoC's unified memory): a working set that no "
    "longer fits it is read from host memory or paged",
    "proxy": "a reverse proxy or gateway between the client and the server (none: direct)",
    "hardware": "GPU or host",
    "os": "operating system or driver setting",
    "gpu_scheduling": "the GPU schedules its own queue of work (on: Windows' hardware-accelerated GPU scheduling) or the "
    "OS does on the CPU (off)",
}

# Engine flag names people paste into runs, and the known setting each one is; a True ``inverted``
# flips a boolean (enforce_eager on means graphs off).
SETTING_ALIASES: dict[str, tuple[str, bool]] = {
    "gpu_memory_utilization": ("kv_cache_capacity", False),
    "mem_fraction_static": ("kv_cache_capacity", False),
    "num_gpu_blocks": ("kv_cache_capacity", False),
    "max_model_len": ("max_context", False),
    "context_length": ("max_context", False),
    "ctx_size": ("max_context", False),
    "n_ctx": ("max_context", False),
    "enforce_eager": ("cuda_graphs", True),
    "disable_cuda_graph": ("cuda_graphs", True),
    "disable_overlap_schedule": ("async_scheduling", True),
    "tensor_parallel_size": ("tp", False),
    "tp_size": ("tp", False),
    "pipeline_parallel_size": ("pp", False),
    "num_speculative_tokens": ("draft_length", False),
    "n_threads": ("threads", False),
    "affinity": ("cpu_affinity", False),
    "cpu_mask": ("cpu_affinity", False),
    "cpuset": ("cpu_affinity", False),
    "taskset": ("cpu_affinity", False),
    "num_thread": ("threads", False),
    "n_gpu_layers": ("gpu_layers", False),
    "device_memory_gb": ("device_memory", False),
    "gpu_memory_gb": ("device_memory", False),
    "vram": ("device_memory", False),
    "vram_gb": ("device_memory", False),
    "unified_memory": ("device_memory", False),
    "unified_memory_gb": ("device_memory", False),
    "ngl": ("gpu_layers", False),
    "kv_cache_location": ("kv_cache_placement", False),
    "kv_location": ("kv_cache_placement", False),
    "kv_placement": ("kv_cache_placement", False),
    "gateway": ("proxy", False),
    "attn_backend": ("attention_backend", False),
    "kv_dtype": ("kv_cache_dtype", False),
    "kv_cache_type": ("kv_cache_dtype", False),
    "cache_dtype": ("kv_cache_dtype", False),
    "enable_lora": ("lora", False),
    "aiter": ("kernel_backend", False),
    "use_aiter": ("kernel_backend", False),
    "expert_parallel": ("ep", False),
    "enable_expert_parallel": ("ep", False),
    "moe_tuned_config": ("moe_config", False),
    "tuned_moe_config": ("moe_config", False),
    "max_running_requests": ("max_num_seqs", False),
    "build_type": ("build", False),
    "hardware_accelerated_gpu_scheduling": ("gpu_scheduling", False),
    "hags": ("gpu_scheduling", False),
    "collective_backend": ("interconnect", False),
    "comm_backend": ("interconnect", False),
    "communication_backend": ("interconnect", False),
    "distributed_backend": ("interconnect", False),
    "streaming": ("stream", False),
    "text_streaming": ("stream", False),
    "gpus": ("devices", False),
    "num_gpus": ("devices", False),
    "n_gpus": ("devices", False),
    "gpu_count": ("devices", False),
    "num_devices": ("devices", False),
}

# A hardware written with its count, as people name a machine: "4x A100 PCIe", "8 x H100", "2×RTX 3090".
COUNTED_HARDWARE = re.compile(r"^\s*(\d{1,4})\s*[x×]\s*(\S.*)$", re.IGNORECASE)


def split_count(settings: dict) -> dict:
    """A hardware written with its count is two settings, the device and how many of them: one copy of the model on
    four A100s and on one is the same hardware with another device count. A count stated apart as well wins."""
    found = COUNTED_HARDWARE.match(settings["hardware"]) if isinstance(settings.get("hardware"), str) else None
    if found is None or settings.get("devices", int(found.group(1))) != int(found.group(1)):
        return settings
    return {**settings, "hardware": found.group(2).strip(), "devices": int(found.group(1))}

# Settings whose change alters the work itself (a sweep), not only how it is done.
WORKLOAD_SETTINGS = ("context", "input_tokens", "output_tokens", "concurrency", "batch")
# Settings whose change replaces the whole code path (another engine, release, build, machine or OS), or that say
# several changed at once: any mechanism may lie inside such a change.
WHOLESALE_SETTINGS = ("engine", "engine_version", "build", "hardware", "os", "several")


class RunFigures(_Obs):
    """What one operating point measured. Give the figures you have; one is enough."""

    per_token_ms: Positive | None = Field(default=None, description="TPOT/ITL or step time per token of one stream")
    output_tokens_per_s: TokenRate | None = Field(default=None, description="aggregate output tokens/s")
    per_user_tokens_per_s: TokenRate | None = Field(default=None, description="tokens/s of one stream")
    duration_s: Positive | None = Field(default=None, description="wall time of a fixed job (a drain, a benchmark)")
    ttft_ms: Positive | None = Field(default=None, description="time to first token (not compared: prefill)")
    host_ms_per_step: float | None = Field(default=None, ge=0, description="host time per step, where instrumented")

    @model_validator(mode="after")
    def _something(self) -> "RunFigures":
        if not any(v is not None for v in self.__dict__.values()):
            raise ValueError("give at least one figure")
        return self


class Run(_Obs):
    """One operating point: the settings it ran with and what it measured."""

    name: str = Field(min_length=1, description="what this operating point is called in the report")
    settings: dict[str, str | float | int | bool] = Field(
        default_factory=dict,
        description=f"named settings; known names: {', '.join(sorted(KNOWN_SETTINGS))}; engine flag names such as "
        f"{', '.join(sorted(SETTING_ALIASES)[:4])} are read as the known setting they are",
    )

    @model_validator(mode="after")
    def _known_names(self) -> "Run":
        """Engine flag names become the known setting they are, so every rule reads one name."""
        settings = {}
        for name, value in self.settings.items():
            known, inverted = SETTING_ALIASES.get(name, (name, False))
            if inverted and isinstance(value, bool):
                value = not value
            if known in settings:
                raise ValueError(f"settings give {known} twice (as {name} and as another name for it)")
            settings[known] = value
        self.settings = split_count(settings)
        return self
    figures: RunFigures = Field(description="what it measured; runs are compared on the first figure both have")
    baseline: bool = Field(default=False, description="the reference run others are compared with (else the first)")
    repeat_spread: float | None = Field(
        default=None, ge=0, description="how far its figure moved between repeats of the same run: (highest - lowest) / "
        "lowest (repeats of 0.5 and 1.0 are 1.0 apart); a smaller difference between runs counts when the repeats are tighter than it",
    )
    repeats: list[Positive] = Field(
        default_factory=list, description="its figure in each repeat of the same run (any one figure, rate or time), in "
        "the order they ran: their spread is the repeat_spread, and a first repeat faster than every later one is the "
        "work slowing under sustained load",
    )

    @model_validator(mode="after")
    def _spread_of_repeats(self) -> "Run":
        """Repeats of one figure state its spread as plainly as a stated fraction does: one field for the rules."""
        if self.repeat_spread is None and len(self.repeats) >= 2:
            self.repeat_spread = (max(self.repeats) - min(self.repeats)) / min(self.repeats)
        return self
    boundary: MetricBoundary = Field(default=MetricBoundary.unknown, description="where its figures were read")
