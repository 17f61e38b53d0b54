"""What each probe measured, as typed figures: the contract between probes and everything else.

A saved probe report travels from the GPU box to wherever the diagnosis runs, so every figure
is declared here with its unit and meaning, and a report with a wrong type, a NaN or a
missing figure is refused when it is read rather than misread later. Figures a probe could
not obtain are present and null (the probe says why, in ``missing`` or a ``*_reason``), so
"not measured" and "left out by mistake" cannot be confused.

A result that is not ``ok`` carries no facts: a skipped probe measured nothing, and the
partial figures of a failed one were never checked, so nothing downstream may lean on them.

Plain pydantic, no torch and nothing from ``diagnoser.probes``: the rule base, the renderers
and ``diagnoser schema probe`` read these on a machine without a GPU stack.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

Status = Literal["ok", "skipped", "failed"]
SweepDtype = Literal["fp32", "bf16", "fp8"]
Device = Literal["cuda", "cpu"]

GBS = "GB/s (1e9 bytes per second)"


class _Figures(BaseModel):
    # strict: a report saying "4400" where a number belongs is a broken report, not 4400
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


# --- device ------------------------------------------------------------------------------


class LiveReadings(_Figures):
    """The NVML readings that change with load; null where NVML could not read one."""

    sm_clock_mhz: int | None = Field(ge=0, description="SM clock at the moment of reading, MHz")
    mem_clock_mhz: int | None = Field(ge=0, description="memory clock at the moment of reading, MHz")
    clock_event_reasons: list[str] | None = Field(
        description="active NVML clock-event (throttle) reasons, e.g. GpuIdle, SwPowerCap; [] is none, null is unreadable"
    )
    power_w: float | None = Field(ge=0, description="board power draw, W")
    missing: dict[str, str] = Field(description="figure -> why NVML could not give it")

    @classmethod
    def unread(cls, missing: dict[str, str]) -> LiveReadings:
        """No reading at all, and why (no driver, the device not found)."""
        return cls(sm_clock_mhz=None, mem_clock_mhz=None, clock_event_reasons=None, power_w=None, missing=missing)


class NvLinkState(_Figures):
    active_links: int = Field(ge=0, description="NVLinks in the enabled state")
    links_checked: int = Field(ge=0, description="links queried before the board reported no more")


class GpuDevice(LiveReadings):
    """One GPU as NVML (and torch, matched by UUID) describe it."""

    index: int = Field(ge=0, description="NVML device index")
    name: str | None = Field(description="device name as NVML reports it, e.g. NVIDIA H200")
    uuid: str | None = Field(description="NVML UUID (GPU-...)")
    memory_total_bytes: int | None = Field(ge=0, description="device memory, bytes")
    memory_free_bytes: int | None = Field(ge=0, description="device memory free when read, bytes")
    memory_bus_width_bits: int | None = Field(ge=0, description="memory bus width, bits")
    max_mem_clock_mhz: int | None = Field(ge=0, description="highest memory clock, MHz")
    theoretical_bandwidth_gbs: float | None = Field(
        ge=0, description=f"bus width x highest memory clock x 2 (double data rate), {GBS}"
    )
    max_sm_clock_mhz: int | None = Field(ge=0, description="highest SM clock, MHz")
    power_limit_w: float | None = Field(ge=0, description="enforced power limit, W")
    temperature_c: int | None = Field(description="GPU core temperature, °C")
    pcie_generation: int | None = Field(ge=0, description="current PCIe link generation")
    pcie_width: int | None = Field(ge=0, description="current PCIe link width, lanes")
    pcie_max_generation: int | None = Field(ge=0, description="highest PCIe generation the link supports")
    nvlink: NvLinkState = Field(description="NVLink state")
    mig_enabled: bool | None = Field(description="MIG mode on; null where the board has no MIG")
    torch_index: int | None = Field(ge=0, description="torch's CUDA index for the same device; null when torch does not see it")
    sm_count: int | None = Field(ge=0, description="streaming multiprocessors (from torch)")
    l2_cache_bytes: int | None = Field(ge=0, description="L2 cache (from torch), bytes")


NVML_SYSTEM_FIELDS = ("driver_version", "cuda_driver_version", "device_count")


class NvmlFacts(_Figures):
    """What NVML says about the machine and each GPU it can open."""

    nvml: str = Field(description="'ok', or why NVML is unavailable (no driver, nvidia-ml-py not installed)")
    driver_version: str | None = Field(description="NVIDIA driver version")
    cuda_driver_version: str | None = Field(description="highest CUDA version the driver supports, e.g. 12.8")
    device_count: int | None = Field(ge=0, description="GPUs NVML lists")
    devices: list[GpuDevice] = Field(description="the GPUs that could be opened, by NVML index")
    missing: dict[str, str] = Field(description="figure (or 'device N') -> why it could not be read")

    @classmethod
    def unavailable(cls, reason: str) -> NvmlFacts:
        """No NVML at all: every system figure missing for the same reason."""
        return cls(
            nvml=reason, driver_version=None, cuda_driver_version=None, device_count=None, devices=[],
            missing={field: reason for field in NVML_SYSTEM_FIELDS},
        )  # fmt: skip

    def primary_device(self) -> GpuDevice | None:
        """The device torch uses by default (index 0), else the first NVML device."""
        return next((d for d in self.devices if d.torch_index == 0), self.devices[0] if self.devices else None)


class DeviceFacts(NvmlFacts):
    torch_cuda: str = Field(description="CUDA version torch was built with, or 'not available'")


# --- bandwidth ---------------------------------------------------------------------------


class BandwidthTiming(_Figures):
    repeats: int = Field(ge=1, description="timed repeats; the figures are their median")
    warmup: int = Field(ge=0, description="untimed calls before timing")
    inner: int = Field(ge=1, description="calls averaged inside one timed repeat")


class BandwidthFacts(_Figures):
    """Achieved memory bandwidth, set against the datasheet and the best plain torch copy."""

    device: Device = Field(description="memory measured: cuda is the GPU's HBM, cpu is host memory")
    buffer_bytes: int = Field(gt=0, description="size of each of the two buffers (source, destination), bytes")
    cache_bytes: int | None = Field(ge=0, description="last-level cache (GPU L2, largest CPU cache), bytes; null when unknown")
    buffer_over_cache: float | None = Field(ge=0, description="buffer_bytes / cache_bytes")
    dtype: str = Field(description="element type of the buffers")
    timing: BandwidthTiming = Field(description="how each rate was timed")
    read_gbs: float = Field(ge=0, description=f"reading one buffer (a sum), {GBS}")
    copy_gbs: float = Field(ge=0, description=f"copying one buffer into the other, read and write counted, {GBS}")
    copy_bytes_counted: str = Field(description="which bytes a copy counts")
    measured_bandwidth_gbs: float = Field(gt=0, description=f"the probe's figure, the larger of read_gbs and copy_gbs, {GBS}")
    best_torch_copy_gbs: float = Field(gt=0, description=f"fastest plain torch copy of this run (the yardstick), {GBS}")
    best_torch_copy_variant: str = Field(description="which copy that was")
    fraction_of_best_torch_copy: float = Field(ge=0, description="measured_bandwidth_gbs / best_torch_copy_gbs")
    theoretical_bandwidth_gbs: float | None = Field(ge=0, description=f"datasheet-style figure, {GBS}; null on a CPU")
    theoretical_source: str = Field(description="where the theoretical figure came from (option, nvml), or why there is none")
    fraction_of_theoretical: float | None = Field(ge=0, description="measured_bandwidth_gbs / theoretical_bandwidth_gbs")
    under_load: LiveReadings | None = Field(description="NVML readings taken while copies kept the GPU busy; null on a CPU")


# --- gemm --------------------------------------------------------------------------------


class GemmSweepPoint(_Figures):
    """One GEMM of M rows through one expert weight; fractions are null without a peak figure."""

    m: int = Field(ge=1, description="rows: tokens routed to the expert")
    time_us: float = Field(ge=0, description="median time of one GEMM, µs")
    tflops: float = Field(ge=0, description="achieved TFLOP/s, counting 2·M·N·K per GEMM")
    gbs: float = Field(ge=0, description=f"bytes the GEMM must move (activations, weight, output) over its time, {GBS}")
    fraction_of_peak_flops: float | None = Field(ge=0, description="achieved over the hardware's peak FLOP/s")
    fraction_of_peak_bandwidth: float | None = Field(ge=0, description="achieved over the peak (or measured) bandwidth")
    fraction_of_roofline: float | None = Field(ge=0, description="roofline time over measured time; 1 is at the bound")


class GemmShapeSweep(_Figures):
    name: str = Field(description="the projection, e.g. 'deepseek-v3 expert gate_up'")
    n: int = Field(ge=1, description="output columns (N)")
    k: int = Field(ge=1, description="reduction depth (K)")
    dtype: SweepDtype = Field(description="operand type")
    weight_copies: int = Field(ge=1, description="weight copies cycled so repeats are not served from cache")
    points: list[GemmSweepPoint] = Field(description="one per M, smallest first")
    m_doubling_time_at: int | None = Field(ge=1, description="first M whose time is twice the smallest M's; null if none swept")


class GemmSkip(_Figures):
    name: str = Field(description="shape not swept")
    dtype: SweepDtype = Field(description="operand type")
    reason: str = Field(description="why this torch or card refused it")


class GemmFacts(_Figures):
    """Expert GEMMs at decode rows per expert, against the roofline."""

    device: Device = Field(description="where the GEMMs ran")
    device_name: str | None = Field(description="GPU name from torch; null on a CPU")
    dtypes: list[SweepDtype] = Field(description="operand types swept")
    dtypes_skipped: dict[str, str] = Field(description="operand type asked for -> why it cannot be swept here")
    shapes_source: str = Field(description="where the shapes came from (option, workload model, default model)")
    scaled_for_cpu: bool = Field(description="shapes cut down so a CPU sweep takes seconds")
    hardware: str | None = Field(description="hardware preset whose peaks are used; null when none matched")
    peak_tflops: dict[str, Annotated[float, Field(ge=0)]] | None = Field(description="operand type -> peak TFLOP/s")
    peak_bandwidth_gbs: float | None = Field(ge=0, description=f"bandwidth the fractions are taken against, {GBS}")
    m_values: list[Annotated[int, Field(ge=1)]] = Field(description="rows per expert swept")
    shapes: list[GemmShapeSweep] = Field(description="one sweep per projection and operand type")
    skipped: list[GemmSkip] = Field(description="projections this torch or card refused")


# --- graphs ------------------------------------------------------------------------------


class GraphBatch(_Figures):
    """One batch size, eager and (on a GPU) replayed from a CUDA graph; graph figures null when not captured."""

    batch: int = Field(ge=1, description="sequences in the step")
    eager_step_ms: float = Field(ge=0, description="median step issued op by op, ms")
    launches_per_step: int = Field(ge=1, description="torch operations one step issues")
    launches_counted_as: str = Field(description="what launches_per_step counts")
    eager_us_per_launch: float = Field(ge=0, description="eager step time per launch, µs")
    captured: bool | None = Field(description="whether CUDA-graph capture worked; null where not tried (CPU)")
    capture_error: str | None = Field(description="why capture was refused")
    replay_matches_eager: bool | None = Field(description="replay gave the eager result (within 1e-3)")
    graph_step_ms: float | None = Field(ge=0, description="median step replayed from the graph, ms")
    graph_gain: float | None = Field(ge=0, description="eager_step_ms / graph_step_ms")
    launch_cost_us: float | None = Field(ge=0, description="(eager - graph step time) per launch, µs: the host cost a graph removes")


class GraphsFacts(_Figures):
    device: Device = Field(description="where the step ran")
    layers: int = Field(ge=1, description="decode-shaped layers in the step")
    hidden: int = Field(ge=1, description="hidden width")
    dtype: str = Field(description="element type of the step")
    mode: str = Field(description="what was measured: eager and CUDA graph, or eager only")
    graph_skipped_reason: str | None = Field(description="why no graph was captured at all")
    batches: list[GraphBatch] = Field(description="one per batch size")


# --- collectives -------------------------------------------------------------------------


class CollectiveSummary(_Figures):
    """One collective at one message size, medians over iterations, all ranks on one clock."""

    op: str = Field(description="all_reduce or all_to_all")
    message_bytes: int = Field(ge=0, description="bytes per call on each rank")
    group_size: int = Field(ge=2, description="ranks taking part")
    iterations: int = Field(ge=1, description="iterations every rank completed")
    interval_ms: float = Field(ge=0, description="first arrival to last departure, ms")
    transfer_ms: float = Field(ge=0, description="last arrival to departure (median over ranks), ms")
    wait_ms: float = Field(ge=0, description="last arrival minus first arrival, ms")
    late_rank: int = Field(ge=0, description="the rank most often last to arrive")
    late_fraction: float = Field(ge=0, le=1, description="share of iterations in which late_rank was last")
    late_by_ms: float = Field(ge=0, description="how long late_rank alone held the call up (median over iterations), ms")
    hold_up_ms: list[Annotated[float, Field(ge=0)]] = Field(description="per rank: mean time the call waited for that rank alone, ms")
    mean_wait_ms: list[Annotated[float, Field(ge=0)]] = Field(description="per rank: mean time spent waiting for others, ms")
    preceding_compute_ms: float = Field(ge=0, description="work on late_rank before it arrived (median), ms")
    extra_compute_ms: float = Field(description="late_rank's preceding work minus the other ranks' median, ms (negative: less)")
    bus_bandwidth_gbs: float | None = Field(ge=0, description=f"bus bandwidth over the transfer time (nccl-tests convention), {GBS}")


class InjectedDelay(_Figures):
    rank: int = Field(ge=0, description="rank that slept before each collective")
    ms: float = Field(gt=0, description="how long it slept, ms")


class CollectivesFacts(_Figures):
    backend: Literal["nccl", "gloo"] = Field(description="torch.distributed backend: nccl with a GPU per rank, else gloo on the host")
    backend_note: str | None = Field(description="why the backend differs from the one asked for")
    dtype: str = Field(description="element type the collectives moved")
    world_size: int = Field(ge=2, description="ranks launched")
    clock: str = Field(description="the clock every rank stamped its calls with")
    injected_delay: InjectedDelay | None = Field(description="the extra work injected before each call on one rank; null when none")
    late_rank: int | None = Field(ge=0, description="the one rank whose lateness, not the transfer, dominated; null if none")
    collectives: list[CollectiveSummary] = Field(description="one entry per op and message size")


# --- client and context sweep ------------------------------------------------------------


class LatencyStats(_Figures):
    """Mean and linear-interpolated percentiles (as vLLM computes them) of one latency, ms."""

    n: int = Field(ge=1, description="samples")
    mean: float = Field(ge=0, description="mean, ms")
    p50: float = Field(ge=0, description="median, ms")
    p90: float = Field(ge=0, description="90th percentile, ms")
    p99: float = Field(ge=0, description="99th percentile, ms")


class Bunching(_Figures):
    bunched_fraction: float = Field(ge=0, le=1, description="share of chunk gaps under the threshold: chunks arriving together")
    mean_burst_chunks: float = Field(ge=1, description="chunks per burst, mean")
    max_burst_chunks: int = Field(ge=1, description="chunks in the largest burst")
    threshold_fraction_of_mean_gap: float = Field(gt=0, description="a gap under this share of the request's mean gap counts as together")


class ServerTiming(_Figures):
    """Per token at three boundaries, from a server that stamps its chunks; medians, ms."""

    device_step_ms: float | None = Field(ge=0, description="engine time per token the server reported, ms")
    server_emission_ms: float = Field(ge=0, description="gap between the server's emission stamps, ms")
    client_receipt_ms: float = Field(ge=0, description="gap between the client's receipts, ms")
    buffered_p50_ms: float = Field(ge=0, description="time a chunk spent between emission and receipt beyond the smallest lag, median, ms")
    buffered_p99_ms: float = Field(ge=0, description="the same, 99th percentile, ms")


class ClientFacts(_Figures):
    """What a streaming client receives, with vLLM bench serve definitions."""

    endpoint: str = Field(description="request URL")
    api: str = Field(description="completions or chat")
    model: str = Field(description="model name sent")
    requests: int = Field(ge=1, description="requests sent")
    concurrency: int = Field(ge=1, description="requests in flight at once")
    max_tokens: int = Field(ge=1, description="output tokens asked for per request")
    definitions: str = Field(description="how each latency is defined")
    output_tokens: list[Annotated[int, Field(ge=0)] | None] = Field(description="per request: output tokens the server counted")
    ttft_ms: LatencyStats | None = Field(description="time to first token")
    tpot_ms: LatencyStats | None = Field(description="time per output token after the first, per request")
    itl_ms: LatencyStats | None = Field(description="gaps between consecutive chunks, pooled over requests")
    e2el_ms: LatencyStats | None = Field(description="end-to-end latency")
    output_throughput_tok_s: float | None = Field(ge=0, description="output tokens per second over the whole run")
    per_user_tok_s: float | None = Field(ge=0, description="1 / mean TPOT, tokens per second")
    tokens_per_chunk: float | None = Field(ge=0, description="mean tokens per content chunk")
    tokens_per_chunk_source: str = Field(description="where the token counts came from")
    bunching: Bunching | None = Field(description="how often chunks arrive together; null with too few chunks")
    itl_growth_ms_per_1k_output: float | None = Field(description="slope of the per-token interval against tokens generated, ms per 1k tokens")
    server_timing: ServerTiming | None = Field(description="null when the server does not stamp its chunks")
    client_delay_p99_ms: float | None = Field(
        default=None, ge=0, description="p99 of how late the client's own threads woke while it read (its host's load); null: not measured"
    )
    client_stalled_share: float | None = Field(
        default=None, ge=0, le=1, description="share of the read the client could not run (its host's load, its own GIL); null: not measured"
    )
    stream_encoding: str | None = Field(
        default=None, description="the content-encoding the event streams arrived in (gzip, deflate, br), null: uncompressed"
    )


class ContextSweepPoint(_Figures):
    prompt_tokens: int = Field(ge=1, description="prompt length, tokens")
    output_tokens: float = Field(ge=0, description="output tokens, median over the repeats")
    context: float = Field(ge=0, description="mean context during decode, prompt + output / 2, tokens")
    step_ms: float = Field(ge=0, description="median TPOT, ms")
    ttft_ms: float = Field(ge=0, description="median time to first token, ms")


class ContextSweepFacts(_Figures):
    endpoint: str = Field(description="request URL")
    model: str = Field(description="model name sent")
    repeats: int = Field(ge=1, description="requests per prompt length")
    points: list[ContextSweepPoint] = Field(description="one per prompt length, shortest first")
    step_ms_per_1k_context: float | None = Field(description="least-squares slope of step_ms against context, ms per 1k tokens")
    step_intercept_ms: float | None = Field(description="that line at zero context, ms")
    step_fit_r2: float | None = Field(description="R² of that line")
    ttft_ms_per_1k_prompt: float | None = Field(description="slope of TTFT against prompt length, ms per 1k tokens")


# --- one result per probe ----------------------------------------------------------------


NAME = "the probe; it selects the form of facts"
FACTS = "the probe's figures; null unless status is ok"


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    name: str = Field(description=NAME)
    status: Status = Field(description="ok (facts hold its figures), skipped (it cannot apply here) or failed")
    reason: str | None = Field(default=None, description="why the probe was skipped or failed (one line)")
    duration_s: float = Field(ge=0, description="wall time of the probe, s")

    @model_validator(mode="after")
    def _facts_only_when_ok(self) -> _Result:
        facts = getattr(self, "facts")
        if self.status == "ok" and facts is None:
            raise ValueError("an ok result carries its facts")
        if self.status != "ok" and facts is not None:
            raise ValueError(f"a {self.status} result carries no facts (nothing in it was measured)")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"a {self.status} result says why in reason")
        return self


class DeviceResult(_Result):
    name: Literal["device"] = Field(description=NAME)
    facts: DeviceFacts | None = Field(default=None, description=FACTS)


class BandwidthResult(_Result):
    name: Literal["bandwidth"] = Field(description=NAME)
    facts: BandwidthFacts | None = Field(default=None, description=FACTS)


class GemmResult(_Result):
    name: Literal["gemm"] = Field(description=NAME)
    facts: GemmFacts | None = Field(default=None, description=FACTS)


class GraphsResult(_Result):
    name: Literal["graphs"] = Field(description=NAME)
    facts: GraphsFacts | None = Field(default=None, description=FACTS)


class CollectivesResult(_Result):
    name: Literal["collectives"] = Field(description=NAME)
    facts: CollectivesFacts | None = Field(default=None, description=FACTS)


class ClientResult(_Result):
    name: Literal["client"] = Field(description=NAME)
    facts: ClientFacts | None = Field(default=None, description=FACTS)


class ContextSweepResult(_Result):
    name: Literal["context_sweep"] = Field(description=NAME)
    facts: ContextSweepFacts | None = Field(default=None, description=FACTS)


ProbeResult = Annotated[
    Union[DeviceResult, BandwidthResult, GemmResult, GraphsResult, CollectivesResult, ClientResult, ContextSweepResult],
    Field(discriminator="name"),
]
Facts = Union[DeviceFacts, BandwidthFacts, GemmFacts, GraphsFacts, CollectivesFacts, ClientFacts, ContextSweepFacts]

_RESULT = TypeAdapter(ProbeResult)


def probe_result(**fields: object) -> ProbeResult:
    """The result class of probe ``name`` built from its fields (raises ValidationError)."""
    return _RESULT.validate_python(fields)
