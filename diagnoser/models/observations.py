"""Aggregated observations: what traces and probes established, in the form rules reason over.

Rules never see raw events (a decode window has 10^5-10^6 of them and an experta join over
events is quadratic). Extractors in ``diagnoser.trace`` and ``diagnoser.probes`` reduce events
to these few facts. Every field is optional: a rule that needs a missing one reports which
check to run instead of staying silent.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from diagnoser.models.runtime import HostCost, MemoryObs, PlatformObs, RoutingObs, StreamObs
from diagnoser.models.serving import Expected, Run, ServingMetrics
from diagnoser.models.units import BandwidthGBs, Positive
from diagnoser.models.boundary import Boundary


class _Obs(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class StepBudget(_Obs):
    """Critical-path budget of one representative step on one rank, in non-overlapping parts."""

    rank: int | None = Field(default=None, description="the rank whose step this is (the critical one)")
    step_ms: Positive = Field(description="measured wall time of the step")
    device_ms: float = Field(default=0, ge=0, description="compute/memory kernels on the critical path")
    exposed_comm_ms: float = Field(default=0, ge=0, description="communication not overlapped by compute")
    launch_ms: float = Field(default=0, ge=0, description="GPU idle because the next launch was not yet issued")
    queue_ms: float = Field(default=0, ge=0, description="launched work waiting behind other work on the stream")
    host_ms: float = Field(default=0, ge=0, description="other exposed host work: syncs, D2H for sampling, CPU gaps")
    source: str = Field(default="", description="trace or tool the budget came from")
    summed_across_ranks: bool = Field(
        default=False, description="true when parts were added over ranks (a mistake the guards catch)"
    )
    step_spread_ms: float | None = Field(default=None, ge=0, description="p90 - p10 of step times in the window")
    h2d_ms: float | None = Field(
        default=None, ge=0, description="host-to-device copies in the step; part of device_ms, but over PCIe"
    )
    h2d_exposed_ms: float | None = Field(default=None, ge=0, description="of h2d_ms, time no compute kernel overlaps")
    h2d_bytes: float | None = Field(default=None, ge=0, description="bytes the step's host-to-device copies moved")
    python_calls: int | None = Field(
        default=None, ge=0, description="Python calls the profiler traced during the step (with_stack); each cost host time"
    )
    segmentation: str | None = Field(
        default=None, description="how the trace was cut into steps: profiler_step, range, graph_launch, kernel_pattern or whole_trace"
    )
    unprofiled_step_ms: Positive | None = Field(
        default=None, description="the same steps (same requests, same contexts) timed without the profiler"
    )

    @property
    def parts_ms(self) -> float:
        return self.device_ms + self.exposed_comm_ms + self.launch_ms + self.queue_ms + self.host_ms


class BudgetShares(_Obs):
    """A budget quoted as shares of a step whose length was not given (a profile's percentages)."""

    device: float = Field(default=0, ge=0, le=1, description="compute/memory kernels on the critical path")
    exposed_comm: float = Field(default=0, ge=0, le=1, description="communication not overlapped by compute")
    launch: float = Field(default=0, ge=0, le=1, description="GPU idle waiting for launches")
    queue: float = Field(default=0, ge=0, le=1, description="launched work waiting behind other work")
    host: float = Field(default=0, ge=0, le=1, description="GPU idle waiting for other host work")
    source: str = Field(default="", description="the profile or tool the shares were read from")

    @model_validator(mode="after")
    def _at_most_one(self) -> "BudgetShares":
        if self.device + self.exposed_comm + self.launch + self.queue + self.host > 1.0001:
            raise ValueError("shares of one step add up to more than 1")
        return self


class KernelClassObs(_Obs):
    """One kernel class (GEMM, fused MoE, attention, NCCL, ...) aggregated over the step."""

    kernel_class: str = Field(description="e.g. moe, gemm, attention, communication, elementwise, sampling")
    share_of_step: float | None = Field(
        default=None, ge=0, le=1, description="fraction of the step's device time (or of GPU time, as a kernel summary quotes it)"
    )
    count_per_step: float | None = Field(default=None, ge=0, description="kernel launches of this class per step")
    median_us: float | None = Field(default=None, ge=0, description="median duration of one kernel of this class")
    grid_ctas: float | None = Field(default=None, ge=0, description="median CTAs per launch")
    sm_count: int | None = Field(default=None, gt=0, description="SMs on the GPU (to compare with the CTAs a launch fills)")
    achieved_bw_fraction: float | None = Field(default=None, ge=0, description="achieved / peak memory bandwidth")
    achieved_flops_fraction: float | None = Field(default=None, ge=0, description="achieved / peak FLOP/s")
    tokens_per_expert: float | None = Field(default=None, ge=0, description="mean rows per expert GEMM (MoE only)")
    tuned_config: bool | None = Field(default=None, description="the class's kernels ran with a launch config (block sizes, tiles) tuned for this device and shape")
    backend: str | None = Field(default=None, description="kernel or backend name chosen (attention backend, quant path)")
    expected_backend: str | None = Field(default=None, description="the kernel or backend this GPU and format should use")
    fallback: bool | None = Field(default=None, description="a slower generic or fallback path ran instead of the expected one")
    split_kv: bool | None = Field(default=None, description="attention splits the KV sequence over CTAs (flash-decoding)")
    extra_launches_per_step: float | None = Field(
        default=None, ge=0, description="launches per step beyond the model's own kernels (per-layer metadata, per-expert loops)"
    )
    per_expert_launches: bool | None = Field(
        default=None, description="the MoE layer launches one GEMM (and its gathers) per expert instead of one grouped kernel"
    )
    concurrent_streams: bool | None = Field(
        default=None, description="independent kernels of this class overlap on several streams (false: they run back to back)"
    )
    scales_with_max_context: bool | None = Field(
        default=None, description="the kernel's work follows the configured maximum context, not the live one"
    )


class GraphStatus(str, Enum):
    none = "none"
    partial = "partial"
    full = "full"


class CaptureUnit(str, Enum):
    sequences = "sequences"
    tokens = "tokens"


class GraphReplayObs(_Obs):
    status: GraphStatus | None = Field(
        default=None, description="none/partial/full from a trace; unknown when only a probe measured replay"
    )
    kernel_launches_per_step: float | None = Field(default=None, ge=0, description="kernel launches per step outside graphs")
    graph_launches_per_step: float | None = Field(default=None, ge=0, description="CUDA graph launches per step")
    # a graph is captured for one sequence or more: a size of 0 is no capture, and no largest size
    captured_batch_sizes: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, description="batch sizes (or token counts) the engine captured graphs for"
    )
    max_captured_batch: int | None = Field(
        default=None, ge=1, description="the largest captured size, in the capture list's unit (the engine's cuda_graph_max_bs, max capture size)"
    )
    capture_unit: CaptureUnit | None = Field(default=None, description="what the capture sizes count: sequences or tokens")
    live_batch_size: int | None = Field(default=None, ge=1, description="sequences decoding together on this rank")
    query_tokens_per_sequence: int | None = Field(
        default=None, ge=1, description="tokens each sequence feeds per step (k+1 when verifying k drafts)"
    )
    replayed_at_live_batch: bool | None = Field(default=None, description="a trace or log shows graph replay at the live batch")
    launch_cost_us: float | None = Field(default=None, ge=0, description="measured host cost per kernel launch")
    eager_step_ms: Positive | None = Field(default=None, description="probe: eager step time")
    graph_step_ms: Positive | None = Field(default=None, description="probe: graph-replay step time")


class CollectiveObs(_Obs):
    """One collective (all-reduce, all-to-all, ...) per step, with arrival skew across ranks."""

    op: str = Field(description="all_reduce, all_to_all, all_gather, reduce_scatter, ...")
    implementation: str | None = Field(default=None, description="nccl, custom_allreduce, symm_mem, gloo")
    calls_per_step: float | None = Field(default=None, ge=0, description="calls of this collective per step")
    interval_ms: float | None = Field(
        default=None, ge=0, description="median elapsed time per step of this collective, first arrival to end"
    )
    transfer_ms: float | None = Field(default=None, ge=0, description="time after the last participant arrived")
    wait_ms: float | None = Field(default=None, ge=0, description="time waiting for the last participant")
    late_rank: int | None = Field(default=None, description="the rank the others waited for")
    message_bytes: float | None = Field(default=None, ge=0, description="bytes each call moves per rank")
    effective_bandwidth_gbs: float | None = Field(
        default=None, ge=0, description="algorithm bandwidth: message bytes / transfer time, GB/s (no bus factor)"
    )
    group_size: int | None = Field(default=None, ge=1, description="ranks in the collective's group")
    preceding_compute_ms: float | None = Field(default=None, ge=0, description="compute on the late rank before it arrived")
    bytes_needed: float | None = Field(default=None, ge=0, description="bytes each rank actually needs from the collective")
    fused_with_compute: bool | None = Field(default=None, description="overlapped or fused with the neighbouring GEMM")


class BoundaryTimings(_Obs):
    """The same steps seen at the three clocks; the differences locate host and transport costs."""

    device_step_ms: Positive | None = Field(default=None, description="GPU time of one decode step")
    server_emission_ms: Positive | None = Field(default=None, description="median interval between server emissions")
    client_receipt_ms: Positive | None = Field(default=None, description="median inter-chunk interval at the client")
    client_p99_ms: Positive | None = Field(default=None, description="p99 inter-chunk interval at the client")
    client_p50_ms: Positive | None = Field(default=None, description="median inter-chunk interval at the client")
    buffered_p99_ms: float | None = Field(
        default=None, ge=0, le=1e9, description="p99 time a chunk spent between server emission and client receipt, beyond the smallest lag"
    )
    tokens_per_chunk: Positive | None = Field(default=None, description="tokens per streamed chunk")
    client_delay_p99_ms: float | None = Field(
        default=None, ge=0, le=1e9,
        description="p99 of how late the measuring client's own threads woke while it read: receipt delay its own host added",
    )
    client_stalled_share: float | None = Field(
        default=None, ge=0, le=1,
        description="share of the read the measuring client could not run (its cores busy, its GIL held): that share of the stream's gaps is near zero by the client's own doing",
    )
    ttft_ms: Positive | None = Field(default=None, description="time to first token")
    itl_growth_ms_per_1k_output: float | None = Field(
        default=None, description="slope of inter-token interval against tokens already generated"
    )


class GemmPoint(_Obs):
    """A plain GEMM at a served expert shape and ``m`` rows, timed on this machine by ``diagnoser probe``.

    It is the yardstick for the served MoE kernel: what a stock library GEMM reaches at the same
    rows per expert tells a shape that cannot fill the GPU from a kernel that packs it badly.
    """

    shape: str = Field(description="which expert GEMM, e.g. 'deepseek-v3 expert gate_up'")
    dtype: str = Field(description="weight dtype of the GEMM")
    m: int = Field(ge=1, description="rows (tokens routed to the expert)")
    time_us: Positive = Field(description="measured time of one GEMM")
    bw_fraction: float = Field(ge=0, description="achieved / peak memory bandwidth")


class ContextPoint(_Obs):
    context: int = Field(ge=0, description="tokens already in the context at this point")
    step_ms: Positive = Field(description="step time at that context")


class ProbeFacts(_Obs):
    """Machine facts from ``diagnoser probe``."""

    gpu_name: str | None = Field(default=None, description="the device name the driver reports")
    measured_bandwidth_gbs: BandwidthGBs | None = Field(default=None, description="device-to-device copy bandwidth measured by the probe")
    theoretical_bandwidth_gbs: BandwidthGBs | None = Field(default=None, description="datasheet memory bandwidth")
    sm_clock_mhz: float | None = Field(default=None, ge=0, description="SM clock during the run")
    max_sm_clock_mhz: float | None = Field(default=None, ge=0, description="highest SM clock the GPU supports")
    mem_clock_mhz: float | None = Field(default=None, ge=0, description="memory clock during the run")
    max_mem_clock_mhz: float | None = Field(default=None, ge=0, description="highest memory clock the GPU supports")
    throttle_reasons: list[str] = Field(default_factory=list, description="clock-event reasons NVML reported")
    power_w: float | None = Field(default=None, ge=0, description="board power during the run")
    power_limit_w: float | None = Field(default=None, ge=0, description="enforced power limit")
    default_power_limit_w: float | None = Field(default=None, ge=0, description="the board's default power limit (nvidia-smi's Default Power Limit)")
    temperature_c: float | None = Field(default=None, description="GPU temperature")
    nvlink_active_links: int | None = Field(default=None, ge=0, description="active NVLink links")
    peer_access: bool | None = Field(
        default=None,
        description="the GPUs read and write each other's memory directly (CUDA peer-to-peer); false: disabled (NCCL_P2P_DISABLE) "
        "or unsupported, so what passes between them stages through host memory",
    )
    pcie_generation: int | None = Field(default=None, ge=0, description="current PCIe link generation")
    device_utilization: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="share of the time the device ran a kernel while tokens were generated, its mean over the decode "
        "(nvidia-smi's utilization.gpu, tegrastats' GR3D_FREQ percent, as a fraction)",
    )


class SpeculationObs(_Obs):
    draft_length: int | None = Field(default=None, ge=1, description="k drafted tokens per cycle (when fixed)")
    drafted_per_cycle: float | None = Field(default=None, ge=0, description="measured drafted tokens per cycle (adaptive drafters)")
    acceptance: float | None = Field(default=None, ge=0, le=1, description="constant conditional acceptance a")
    acceptance_rate: float | None = Field(
        default=None, ge=0, le=1, description="accepted draft tokens / drafted tokens over a window (counters; not the conditional a)"
    )
    mean_accepted_per_cycle: float | None = Field(default=None, ge=0, description="measured emitted tokens per cycle")
    draft_ms: float | None = Field(default=None, ge=0, description="time to draft k tokens per cycle")
    verify_ms: float | None = Field(default=None, ge=0, description="target-model verification time per cycle")
    other_ms: float | None = Field(default=None, ge=0, description="other per-cycle work (sampling, bookkeeping)")
    ordinary_step_ms: Positive | None = Field(default=None, description="an ordinary one-token decode step, same workload")
    verify_step_share: float | None = Field(
        default=None, ge=0, le=1, description="share of the traced steps the ordinary step was taken from (one batch) that verified drafts"
    )
    drafted_per_sequence_step: float | None = Field(
        default=None, ge=0, description="drafted tokens each sequence fed per step over those traced steps (0 on a step without drafts)"
    )
    claimed_speedup: Positive | None = Field(default=None, description="speed-up someone quoted, to be checked")
    context: int | None = Field(default=None, ge=0, description="context the speculation figures were measured at")


class ServerConfig(_Obs):
    """Serving-engine settings that decide which costs exist at all."""

    engine: str | None = Field(default=None, description="vllm, sglang, trt-llm, ...")
    engine_version: str | None = Field(default=None, max_length=100, description="release or build of the engine, as it reports it (0.32.0)")
    cuda_graphs: bool | None = Field(default=None, description="decode replays CUDA graphs (false: eager, e.g. enforce-eager)")
    cuda_graph_max_batch: int | None = Field(default=None, ge=0, description="largest batch size captured in a graph")
    custom_allreduce: bool | None = Field(default=None, description="the engine's custom all-reduce is in use (false: plain NCCL)")
    interconnect: str | None = Field(default=None, description="nvlink, pcie, xgmi")
    link: Literal["nvlink", "xgmi", "pcie", "network"] | None = Field(
        default=None,
        description="the kind of link the devices' collectives cross: a GPU fabric (nvlink, xgmi), pcie, or a network between "
        "machines (Ethernet, RoCE, InfiniBand, Thunderbolt, TCP)",
    )
    cpu_offload_gb: float | None = Field(default=None, ge=0, description="weights offloaded to host memory, GB per rank")
    sampling: str | None = Field(default=None, description="where and how sampling runs, e.g. 'gpu-sort', 'cpu', 'flashinfer'")
    repetition_penalty: bool | None = Field(default=None, description="a repetition penalty is applied")
    chunked_prefill: bool | None = Field(default=None, description="long prompts are prefilled in chunks between decode steps")
    streaming_proxy: str | None = Field(default=None, description="proxy between server and client, if any")
    attention_backend: str | None = Field(default=None, description="attention kernel family in use")
    quantization: str | None = Field(default=None, description="weight quantization scheme in use")
    structured_output: bool | None = Field(default=None, description="requests decode under a grammar or JSON schema")
    penalties: bool | None = Field(default=None, description="frequency/presence penalties on (repetition_penalty covers that one)")
    top_k: int | None = Field(default=None, description="top-k; 0 or below means the whole vocabulary")
    vocab_size: int | None = Field(default=None, ge=1, description="tokens in the vocabulary (sampling and masks scale with it)")
    lora_adapters: int | None = Field(default=None, ge=0, description="LoRA adapters served")
    speculative: str | None = Field(default=None, description="speculative method configured (ngram, eagle, draft model), if any")
    speculative_active: bool | None = Field(default=None, description="false when speculation is configured but disabled at this load")
    async_scheduling: bool | None = Field(default=None, description="host scheduling overlaps the running step")
    max_context: int | None = Field(default=None, ge=1, description="configured maximum context length")
    max_num_seqs: int | None = Field(default=None, ge=1, description="most sequences the scheduler runs at once")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=1, description="most tokens the scheduler puts in one step, prefill chunks and decodes together"
    )
    long_prefill_token_threshold: int | None = Field(
        default=None, ge=0, description="a prompt longer than this is prefilled at most this many tokens a step (0: no cap)"
    )
    torch_compile: bool | None = Field(
        default=None, description="the model runs compiled (torch.compile/inductor); false: op by op in eager PyTorch"
    )
    structured_output_backend: str | None = Field(default=None, description="grammar engine for constrained decoding (xgrammar, guidance, outlines)")
    kv_cache_tokens: int | None = Field(default=None, ge=1, description="tokens the allocated KV cache holds, all sequences together")
    kv_cache_dtype: str | None = Field(default=None, description="storage format of the KV cache as configured (auto: the model's dtype)")
    prefix_caching: bool | None = Field(default=None, description="automatic prefix caching is on")
    prefill_priority: bool | None = Field(default=None, description="prefill chunks are scheduled before any decode")
    tokenizer_fast: bool | None = Field(default=None, description="false when a slow (pure-Python) tokenizer is in use")
    multimodal: bool | None = Field(default=None, description="requests carry images, audio or video")


class HostObs(_Obs):
    """Host-side facts between steps."""

    gap_between_steps_ms: float | None = Field(default=None, ge=0, description="median GPU-idle time between steps")
    scheduler_ms: float | None = Field(default=None, ge=0, description="host time per step in the scheduler")
    python_gil_busy_fraction: float | None = Field(default=None, ge=0, le=1, description="share of time the serving process's GIL is held")
    prefill_interleaved: bool | None = Field(default=None, description="prefill chunks run in the same steps as decode")
    itl_spike_ratio: float | None = Field(default=None, ge=0, description="p99 / p50 inter-token interval")


class Claim(str, Enum):  # claims is an open list: any other string is kept as written
    """A belief the team already holds; lessons and guards test it against the evidence."""

    uncoalesced_expert_reads = "uncoalesced_expert_reads"
    sampling_on_cpu = "sampling_on_cpu"
    ep_will_help = "ep_will_help"
    smaller_tp_fewer_collectives = "smaller_tp_fewer_collectives"
    graphs_close_gap = "graphs_close_gap"
    fraction_is_normal = "fraction_is_normal"
    trace_rate_is_capacity = "trace_rate_is_capacity"


class StepMixObs(_Obs):
    """Engine steps told apart by what they held: decodes only, prefill only, or both (a long prompt
    admitted between decodes). A decode stream pays a mixed step's extra time as one long gap."""

    decode_steps: int = Field(default=0, ge=0, description="steps that only decoded")
    prefill_steps: int = Field(default=0, ge=0, description="steps that only prefilled")
    mixed_steps: int = Field(default=0, ge=0, description="steps that prefilled beside running decodes")
    decode_step_ms: Positive | None = Field(default=None, description="median decode-only step")
    mixed_step_ms: Positive | None = Field(default=None, description="median mixed step")
    prefill_step_ms: Positive | None = Field(default=None, description="median step that only prefilled")
    longest_prefill_step_ms: Positive | None = Field(
        default=None, description="the longest step that prefilled (alone or beside decodes): how long one prompt held the engine")
    longest_prefill_tokens: int | None = Field(default=None, ge=0, description="the most prompt tokens one step prefilled")
    prefill_tokens_per_mixed_step: float | None = Field(default=None, ge=0, description="median prompt tokens a mixed step prefilled")
    source: str = Field(default="", description="trace the steps were read from")


class Observations(_Obs):
    budget: StepBudget | None = Field(default=None, description="critical-path budget of one representative step")
    rank_budgets: list[StepBudget] = Field(default_factory=list, description="the same step on every rank")
    kernel_classes: list[KernelClassObs] = Field(default_factory=list, description="kernel classes aggregated over the step")
    graph: GraphReplayObs | None = Field(default=None, description="CUDA-graph capture and replay facts")
    collectives: list[CollectiveObs] = Field(default_factory=list, description="collectives per step with their arrival skew")
    boundaries: BoundaryTimings | None = Field(default=None, description="the same steps at device, server and client")
    context_sweep: list[ContextPoint] = Field(default_factory=list, description="step time at controlled context lengths")
    gemm_sweep: list[GemmPoint] = Field(default_factory=list, description="plain expert GEMMs by rows, from the probe")
    probe: ProbeFacts | None = Field(default=None, description="machine facts from diagnoser probe")
    speculation: SpeculationObs | None = Field(default=None, description="speculative decoding counters and costs")
    server: ServerConfig | None = Field(default=None, description="serving-engine settings")
    host: HostObs | None = Field(default=None, description="host-side facts between steps")
    kernel_sum_across_ranks_ms: float | None = Field(
        default=None, ge=0, description="sum of kernel time over all ranks; NOT elapsed time"
    )
    claimed_step_ms: Positive | None = Field(
        default=None, description="a step time someone built by adding parts (checked against the measured step)"
    )
    bound_boundary: Boundary | None = Field(default=None, description="boundary the compared bound refers to")
    claims: list[Claim | str] = Field(
        default_factory=list, description=f"explanations already on the table; known: {', '.join(c.value for c in Claim)}"
    )
    budget_shares: BudgetShares | None = Field(default=None, description="a budget quoted as shares of an unknown step")
    metrics: ServingMetrics | None = Field(default=None, description="serving figures of the slow configuration")
    expected: Expected | None = Field(default=None, description="the figure it was compared with")
    runs: list[Run] = Field(default_factory=list, max_length=64, description="operating points that differ in named settings")
    host_costs: list[HostCost] = Field(default_factory=list, max_length=64, description="named host costs per decode step")
    routing: RoutingObs | None = Field(default=None, description="MoE routing: rows per expert, load per EP rank")
    memory: MemoryObs | None = Field(default=None, description="KV usage, preemptions, offload")
    platform: PlatformObs | None = Field(default=None, description="build type, GPU architecture, device API, CPU threads")
    stream: StreamObs | None = Field(default=None, description="stalls and bursts a stream saw")
    step_mix: StepMixObs | None = Field(default=None, description="decode-only, prefill and mixed steps in a trace")
