"""Facts about the running system that a report states without a budget: host costs by name,
routing, memory pressure, the build and platform, and how bursty the stream is.

Each is a fact a cause produces and few others do, so a rule can name the cause from it at
the grade its evidence supports: a measured host cost bounds a gain, a configuration flag
only indicates one.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from diagnoser.models.units import Positive


class _Obs(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class HostCostName(str, Enum):
    """Host work on the decode path that the device bound does not count."""

    detokenize = "detokenize"  # incremental detokenization, stop-string checks
    output_serialization = "output_serialization"  # building and encoding response chunks
    sampling = "sampling"  # top-k/top-p/min-p on the host or outside the graph
    penalties = "penalties"  # repetition/frequency/presence penalties
    logits_processors = "logits_processors"  # user or framework logits processors, masks
    structured_output = "structured_output"  # grammar or schema masks
    scheduler = "scheduler"  # batch formation, bookkeeping per step
    kv_block_bookkeeping = "kv_block_bookkeeping"  # block allocation, eviction, prefix-cache maps
    input_prep = "input_prep"  # building input tensors, block tables, metadata
    allocation = "allocation"  # allocating host or device buffers each step
    kernel_submission = "kernel_submission"  # launching or submitting device work
    speculation = "speculation"  # proposing, scoring, rejection sampling
    h2d_copy = "h2d_copy"  # host-to-device copies issued each step (pageable, per request)
    device_sync = "device_sync"  # the host blocks on the device (.item(), synchronising copies)
    other = "other"


class Growth(str, Enum):
    """What a cost grows with; a cost that grows with output length is paid more late in a stream."""

    batch = "batch"
    output_length = "output_length"
    context = "context"
    vocabulary = "vocabulary"
    max_context = "max_context"  # the configured maximum, not the live length


class HostCost(_Obs):
    """One named host cost per decode step, measured (a profiler, a timer) or estimated."""

    name: HostCostName = Field(description="which host work this is")
    ms_per_step: float | None = Field(default=None, ge=0, description="time per decode step (or per emitted token)")
    share_of_step: float | None = Field(default=None, ge=0, le=1, description="fraction of the step, when only that was quoted")
    reference_ms: float | None = Field(default=None, ge=0, description="the same cost in the reference run (older version, other config)")
    measured: bool = Field(default=True, description="false for an estimate (then it indicates, it does not bound)")
    exposed: bool | None = Field(default=None, description="true when the GPU idles during it (not overlapped)")
    grows_with: list[Growth] = Field(default_factory=list, description="what the cost grows with, where the report says so")
    note: str = Field(default="", description="what the work is, in the report's words")


class RoutingObs(_Obs):
    """MoE routing as the engine saw it."""

    active_experts_per_step: float | None = Field(default=None, ge=0, description="distinct experts touched per layer per step")
    tokens_per_expert: float | None = Field(default=None, ge=0, description="mean rows per expert GEMM at decode")
    expert_load_per_rank: list[float] = Field(default_factory=list, description="tokens (or time) per EP rank for one step")
    kernel_tile_rows: int | None = Field(default=None, ge=1, description="rows the grouped-GEMM kernel pads each expert to")


class MemoryObs(_Obs):
    """Capacity facts: what fits, and what the engine does when it does not."""

    weights_fit_without_offload: bool | None = Field(default=None, description="the weights fit in device memory without offloading")
    kv_cache_usage: float | None = Field(default=None, ge=0, le=1, description="fraction of KV blocks in use")
    preemptions: float | None = Field(default=None, ge=0, description="preemptions or swaps during the window")
    waiting_requests: float | None = Field(default=None, ge=0, description="requests queued for KV space")
    requests_beyond_cache: float | None = Field(
        default=None, ge=0, description="requests in flight beyond those whose prompt and output the KV cache holds at once "
        "(in flight less the cache's tokens over a request's tokens): they wait for blocks, or preempt others"
    )
    kv_cache_on_device: bool | None = Field(default=None, description="false when the KV cache (and attention) stays on the host")
    spilled_to_host_gb: float | None = Field(
        default=None, ge=0, description="device allocations the driver placed in host memory (Windows 'shared GPU memory', unified-memory oversubscription)"
    )
    device_memory_full: bool | None = Field(
        default=None, description="no device memory was left once the model loaded (a log's 'VRAM exhausted', '0 MiB free'): what "
        "is allocated after it goes wherever the driver puts it, or is refused"
    )
    layers_on_device: int | None = Field(default=None, ge=0, description="model layers placed on the device (llama.cpp's -ngl, as its log reports)")
    layers_total: int | None = Field(default=None, ge=1, description="model layers in all, on the device or not")
    weights_on_host_fraction: float | None = Field(
        default=None, ge=0, le=1, description="share of the model held in host memory and run or read from there (Ollama's 'ollama ps' "
        "PROCESSOR column: 11%/89% CPU/GPU is 0.11)"
    )


class BuildType(str, Enum):
    release = "release"
    debug = "debug"  # assertions, sanity scans, no optimisation flags


class PlatformObs(_Obs):
    """The build and the platform the engine runs on."""

    build_type: BuildType | None = Field(default=None, description="release or debug build of the engine")
    asserts_enabled: bool | None = Field(default=None, description="debug assertions or NaN/Inf scans compiled in")
    gpu_arch: str | None = Field(default=None, description="compute capability or ISA, e.g. '7.0', 'sm_90', 'gfx1201'")
    kernels_for_arch: bool | None = Field(default=None, description="false when the build has no native kernels for this GPU")
    fallback_logged: str | None = Field(default=None, description="a log line saying a slower path or backend was chosen")
    fallback_read_as: list[str] = Field(
        default_factory=list, description="derived: the facts the logged line was read as (a placement, a kernel config), "
        "so that it is theirs and not a build's fallback; filled by the canonical step"
    )
    feature_gated_off: str | None = Field(default=None, description="a feature the engine turned off for this platform (graphs, a kernel)")
    device_api: str | None = Field(default=None, description="cuda, rocm, vulkan, metal, cpu, npu")
    os: str | None = Field(default=None, description="operating system and any scheduling setting of note")
    sysmem_fallback: bool | None = Field(
        default=None, description="the driver places device allocations that do not fit in host memory instead of failing them "
        "(Windows' WDDM driver, under WSL2 too): a full device spills rather than runs out"
    )
    cpu_threads: int | None = Field(default=None, ge=1, description="threads the engine runs its CPU work on")
    cpu_cores_available: Positive | None = Field(default=None, description="cores the process may use (cgroup quota or cpuset)")
    cpu_throttled_fraction: float | None = Field(default=None, ge=0, le=1, description="share of CFS periods throttled")
    cpu_cores_busy: Positive | None = Field(
        default=None, description="cores the serving process kept busy while decoding (top's %CPU / 100, or the container's "
        "CPU use in cores): held against cpu_cores_available, it says whether the host's CPU work had a core free"
    )
    cpu_physical_cores: int | None = Field(default=None, ge=1, description="physical cores the process may use (SMT siblings counted once)")
    cpu_clock_mhz: float | None = Field(default=None, gt=0, description="CPU core clock while tokens are generated (cpufreq, /proc/cpuinfo)")
    cpu_max_clock_mhz: float | None = Field(default=None, gt=0, description="the CPU's highest core clock (its rated boost)")
    host_bound_reported: bool | None = Field(default=None, description="a profile or the maintainers found the loop CPU-bound")
    power_saving: bool | None = Field(
        default=None, description="an OS or firmware power-saving mode was on while tokens were generated (macOS Low Power Mode, "
        "a Windows battery saver or power-saver plan, Linux's powersave governor or power-saver profile)"
    )


# A fifth of a stream's gaps too short to be a step is not jitter: the client read chunks that waited for it (a loaded
# host delays the reader; a proxy holds chunks), so its gaps are not token times. A stream read as it is made, one token
# a step, has almost none. The client probe, the benchmark readers and the canonical step all draw this line.
BURSTY_FRACTION = 0.2


class StreamObs(_Obs):
    """How tokens reach the client, beyond the median interval."""

    worst_stall_ms: Positive | None = Field(default=None, description="the longest gap a stream saw")
    bursty: bool | None = Field(default=None, description="tokens arrive in bursts rather than one per step")
    tokens_per_burst: Positive | None = Field(default=None, description="tokens that arrive together in one burst")
    compressed: bool | None = Field(
        default=None, description="the event stream arrived compressed (content-encoding gzip, deflate, br): a compressor on the way "
        "holds events until its buffer fills or it flushes",
    )
    near_zero_gap_fraction: float | None = Field(
        default=None, ge=0, le=1, description="share of chunk gaps too short to be a step: chunks read together after a stall"
    )
