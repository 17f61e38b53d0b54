"""One home per physical fact: the canonical field each fact is read from, filled from every other
way a case, a probe, a trace, a live server or an imported file can state it.

People (and readers) put the same fact in different places: the largest captured graph batch in
``server`` or as ``graph``'s capture list, the live batch as the workload's batch or the engine's
running count, acceptance as a counter ratio or as tokens per cycle. Rules read only the
canonical field; ``canonical`` fills it, before the engine sees the case, from the first
alternative stated, and records where it came from in ``case.sources``. A canonical field the
case states itself is never overwritten. ``docs/canonical-facts.md`` is this table in prose.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.runtime import BURSTY_FRACTION
from diagnoser.models.serving import ENGINE_SIDE, SERVER_CLOCKS

Read = Callable[[dict], Any]  # a stated value from the case (as a plain dict), or None

# The log line people paste into a case; several facts are read from the formats tools print there.
LOGGED_LINE = "observations.platform.fallback_logged"


def _at(path: str) -> Read:
    def read(data: dict) -> Any:
        node: Any = data
        for key in path.split("."):
            if not isinstance(node, dict):
                return None
            node = node.get(key)
        return node

    return read


@dataclass(frozen=True)
class Alternative:
    path: str  # how a case states it, as documented
    read: Read
    how: str = ""  # the conversion, when it is not the value itself


@dataclass(frozen=True)
class Equivalence:
    canonical: str
    meaning: str
    alternatives: tuple[Alternative, ...]
    only_with: str = ""  # a section that must already be stated: a fact about it means nothing alone


def same(path: str) -> Alternative:
    return Alternative(path, _at(path))


def _largest(path: str) -> Alternative:
    def read(data: dict) -> Any:
        sizes = _at(path)(data)
        return max(sizes) if sizes else None

    return Alternative(path, read, "the largest size in the capture list")


def _running(data: dict) -> Any:
    """The engine's running count is a gauge, often averaged over a window (1.5 running); a batch is whole."""
    count = _at("observations.metrics.running_sequences")(data)
    return round(count) if isinstance(count, (int, float)) and count >= 1 else None


def _beyond_cache(data: dict) -> Any:
    """Requests in flight whose prompt and output the KV cache cannot hold beside the others: a request keeps its
    prompt's and its output's KV until it ends, so the cache holds at most its tokens over a request's tokens of them at
    once (the engine's block rounding takes a little more). The rest wait for blocks, or preempt running ones."""
    cache = _at("observations.server.kv_cache_tokens")(data)
    streams = _at("observations.metrics.concurrency")(data)
    tokens = (_at("observations.metrics.input_tokens")(data) or 0) + (_at("observations.metrics.output_tokens")(data) or 0)
    if not cache or not streams or tokens <= 0:
        return None
    beyond = streams - cache // tokens
    return beyond if beyond > 0 else None


def _batch_per_rank(data: dict) -> Any:
    batch, dp = _at("workload.batch")(data), _at("workload.layout.dp")(data) or 1
    return batch // dp if isinstance(batch, int) and batch >= dp else None


def _accepted_rate(data: dict) -> Any:
    """Tokens emitted per cycle count the verify's own token: (emitted - 1) / k drafts were accepted, k the
    tokens drafted per cycle where measured, else the draft length; one token a cycle is none accepted,
    whatever k was."""
    emitted = _at("observations.speculation.mean_accepted_per_cycle")(data)
    k = _at("observations.speculation.drafted_per_cycle")(data) or _at("observations.speculation.draft_length")(data)
    if emitted == 1:
        return 0.0
    if emitted is None or not k or not 1 <= emitted <= k + 1:
        return None
    return (emitted - 1) / k


def _no_drafts(path: str, idle: float, how: str) -> Alternative:
    """Speculation that proposes nothing verifies nothing: a drafter measured at zero drafts a cycle, or steps that feed
    each sequence one query token (verifying k drafts feeds k + 1), is configured but inactive, whatever its setting."""
    def read(data: dict) -> Any:
        return False if _at(path)(data) == idle else None

    return Alternative(path, read, how)


def _spike_ratio(section: str, p99: str, p50: str) -> Read:
    def read(data: dict) -> Any:
        tail, typical = _at(f"{section}.{p99}")(data), _at(f"{section}.{p50}")(data)
        return tail / typical if tail and typical else None

    return read


def _near_zero_gaps(data: dict) -> Any:
    share = _at("observations.stream.near_zero_gap_fraction")(data)
    return True if isinstance(share, (int, float)) and share >= BURSTY_FRACTION else None


# Chunks a burst must hold before its gaps say something held them. On the real vLLM lab a loaded reader
# caught up 1.3-1.7 chunks at a time (faults without a proxy, 2 cores); nginx with gzip released 21.
HELD_BURST_CHUNKS = 4


def _held_bursts(data: dict) -> bool:
    per_burst = _at("observations.stream.tokens_per_burst")(data)
    per_chunk = _at("observations.boundaries.tokens_per_chunk")(data) or 1.0
    return _at("observations.stream.bursty")(data) is True and per_burst is not None and per_burst / per_chunk >= HELD_BURST_CHUNKS


def _client_chunking(data: dict) -> Any:
    """How a client's stream was chunked says how the client's own figures count tokens; an engine's histograms count
    the engine's outputs, whatever the transport coalesced on the way (two events in one read during a stall)."""
    if _at("observations.metrics.boundary")(data) in ENGINE_SIDE:
        return None
    return _at("observations.boundaries.tokens_per_chunk")(data)


def _engine_interval(data: dict) -> Any:
    """The server's own inter-token interval (its median, else its mean, read at the engine or at emission)
    for a client whose chunks came in bursts of several: its gaps are a read pattern, so the server's
    interval is the typical gap, and the client's p99 against it is what was held on the way. A steady
    stream, or one whose reader only fell a chunk or two behind, keeps its own figures: its p99 against the
    server's median would be the server's own jitter (long prefill steps, a loaded host)."""
    if _at("observations.metrics.boundary")(data) not in SERVER_CLOCKS or not _held_bursts(data):
        return None
    itl = _at("observations.metrics.itl_ms")(data) or {}
    return itl.get("p50") or itl.get("mean")


def _engine_step(data: dict) -> Any:
    """The engine's own time per token of one stream (its TPOT, else its ITL, else its per-stream rate), read at the
    engine: the cadence its steps emit tokens at, against which a client's median interval shows the way out. Not
    beside a client's p99: held against a typical step, that tail is the engine's own jitter as often as a hold."""
    metrics = _at("observations.metrics")(data) or {}
    if metrics.get("boundary") != "engine" or _at("observations.boundaries.client_p99_ms")(data) is not None:
        return None
    for name in ("tpot_ms", "itl_ms"):
        typical = _typical(metrics, name)
        if typical:
            return typical
    rate = metrics.get("per_user_tokens_per_s")
    return 1e3 / rate if rate else None


def _client_step(data: dict) -> Any:
    """A stream's time per token read at the client (its TPOT, mean else median) is the client's interval, a chunk's
    worth of tokens per chunk: beside a device step it says how much of the client's time the device spent (alone it
    is only the TPOT again). Read only at the client: a TPOT read at the engine or unknown says nothing about the way out."""
    metrics = _at("observations.metrics")(data) or {}
    per_token = _typical(metrics, "tpot_ms")
    beside_a_step = _at("observations.boundaries.device_step_ms")(data) is not None
    if metrics.get("boundary") != "client_receipt" or not per_token or not beside_a_step:
        return None
    return per_token * (_at("observations.boundaries.tokens_per_chunk")(data) or 1)


def _sweep(data: dict, setting: str, keep: Callable[[Any], bool] = lambda run: True) -> list[tuple[float, float]]:
    """The case's runs that differ only in ``setting`` (those ``keep`` accepts), as (value, time per token) points."""
    from diagnoser.engine.comparison import sweep_points
    from diagnoser.models.serving import Run

    runs = [Run.model_validate(r) for r in _at("observations.runs")(data) or []]
    return sweep_points([r for r in runs if keep(r)], setting)


# A fixed time per request under this share of the shortest run's time is within what decode itself varies.
FIXED_SHARE = 0.3


def _fixed_cost_per_request(data: dict) -> Any:
    """Runs that differ only in output length, timed per token: total time n * t(n) = a + b * n. A fixed
    part ``a`` that is a large share of the shortest run is a per-request time (prefill, queueing, a
    round trip) inside the rate; decode alone makes the time per token flat or rising with length."""
    points = _sweep(data, "output_tokens")
    if len(points) < 2:
        return None
    ns, totals = [n for n, _ in points], [n * t for n, t in points]
    mean_n, mean_t = sum(ns) / len(ns), sum(totals) / len(totals)
    spread = sum((n - mean_n) ** 2 for n in ns)
    slope = sum((n - mean_n) * (t - mean_t) for n, t in zip(ns, totals)) / spread
    fixed = mean_t - slope * mean_n
    return True if fixed >= FIXED_SHARE * totals[0] else None


# A longer output's time per token this much above the shortest run's is beyond what serving runs repeat within.
GROWS = 1.05


def _growth_across_outputs(data: dict) -> Any:
    """Runs that differ only in output length, each a whole output's time per token, rising with the length: a step
    that costs ``a + g * i`` at the ``i``-th token averages ``a + g * n / 2`` over ``n`` tokens, so the per-token
    time's slope against the length is half the step's growth per token generated. Only when no run is faster per
    token than a shorter one: a fixed time per request (a prefill inside the rate) makes short runs slower per
    token, and that reading is ``rate_includes_prefill``'s. Nor when the slope would leave the first token no time
    (``a <= 0``): runs that far apart for so few more tokens hold one long step (a stall past some length), not a
    step that grows with every token."""
    points = _sweep(data, "output_tokens")
    if len(points) < 2 or any(later < earlier for (_, earlier), (_, later) in zip(points, points[1:])):
        return None
    (n0, t0), (n1, t1) = points[0], points[-1]
    if t1 < GROWS * t0:
        return None
    growth = 2 * (t1 - t0) / (n1 - n0)
    if t0 - growth * n0 / 2 <= 0:
        return None
    return round(growth * 1e3, 4)


# How a run is written as the first after a start (compiling kernels, capturing graphs, filling caches) and as a run
# of the same work after it: a setting whose values say that, or a warm-up switched off against on.
COLD_RUN = re.compile(r"(?<![a-z])(first|cold|boot|startup|initial|fresh)")
WARM_RUN = re.compile(r"(?<![a-z])(warm|repeat|second|subsequent|steady|again)")
# A setting that numbers the runs after a start (run_order, iteration, attempt): the first is run 1 (or 0).
RUN_NUMBER = re.compile(r"(order|index|iteration|attempt|round|run_number|repeat)")


def _first_numbered(setting: str, slower: str, faster: str) -> bool:
    """The slower run is the first of numbered runs after a start, the faster a later one."""
    try:
        first, later = float(slower), float(faster)
    except ValueError:
        return False
    return RUN_NUMBER.search(setting) is not None and first in (0, 1) and later > first


def _warm_reference(data: dict) -> Any:
    """The runs hold a first run after a start and a run after it: the reference is the one read after the warm-up."""
    return False if _warm_up_across_runs(data) else None


def _warm_up_across_runs(data: dict) -> Any:
    """Runs of the same work that differ only in whether the run came first after a start, the first slower by more
    than runs repeat within: the first run's window holds the warm-up the repeat no longer pays."""
    from diagnoser.engine.comparison import OFF, run_deltas
    from diagnoser.models.serving import Run

    runs = [Run.model_validate(r) for r in _at("observations.runs")(data) or []]
    for d in run_deltas(runs):
        if d.setting == "several" or d.ratio < GROWS and 1 / d.ratio < GROWS:
            continue
        slower, _, faster, _ = d.slower_side
        cold = (COLD_RUN.search(slower) is not None and WARM_RUN.search(faster) is not None and not COLD_RUN.search(faster)
                or _first_numbered(d.setting, slower, faster))
        unwarmed = "warm" in d.setting and slower in OFF and faster not in OFF
        if cold or unwarmed:
            return True
    return None


# A prompt this short holds a stream's KV at a few per cent of the weights' bytes for any model (llama-7b's 512 kB a
# token of fp16 KV is 13 % of its 4-bit weights at 1024 tokens): decode reads about the same bytes a step whatever
# the prompt below it, so its time per token varies across such prompts by far less than PROMPT_RATE_SPREAD.
SHORT_PROMPT = 1024
PROMPT_RATE_SPREAD = 2.0


def _prefill_across_prompts(data: dict) -> Any:
    """Runs that differ only in a short prompt, each timed by a stream's rate (not a TPOT, which leaves the first
    token out), whose time per token spreads twice or more: decode cannot move that much over such prompts, so each
    rate carries its own prompt's prefill (and whatever else a request pays once)."""
    rated = _sweep(data, "input_tokens", lambda r: bool(r.figures.per_user_tokens_per_s) and r.figures.per_token_ms is None)
    times = [t for prompt, t in rated if prompt <= SHORT_PROMPT]
    if len(times) < 2:
        return None
    return True if max(times) >= PROMPT_RATE_SPREAD * min(times) else None


def _typical(metrics: dict, name: str) -> Any:
    """A latency figure's mean, else its median."""
    figure = metrics.get(name) or {}
    return figure.get("mean") or figure.get("p50")


def _in_flight(data: dict) -> Any:
    """Little's law: requests completed per second times the time each spends in the server is how many are
    in it on average; the scheduler runs at most ``max_num_seqs`` of them at once. (A data-parallel layout
    comes with the workload's batch, which is read first.)"""
    metrics = _at("observations.metrics")(data) or {}
    rate = metrics.get("requests_per_s")
    latency_ms = _typical(metrics, "request_latency_ms")
    if latency_ms is None and _typical(metrics, "tpot_ms") and metrics.get("output_tokens"):
        latency_ms = metrics["output_tokens"] * _typical(metrics, "tpot_ms") + (_typical(metrics, "ttft_ms") or 0.0)
    if not rate or not latency_ms:
        return None
    in_flight = rate * latency_ms / 1e3
    cap = _at("observations.server.max_num_seqs")(data)
    running = int(min(in_flight, cap) if cap else in_flight)
    return running if running >= 1 else None


# llama.cpp's load line, which its servers and wrappers (Ollama, LM Studio, koboldcpp) print as it is:
# "offloaded 31/33 layers to GPU".
LOGGED_LAYERS = re.compile(r"offloaded\s+(\d+)\s*/\s*(\d+)\s+layers", re.IGNORECASE)


def _logged_layers(which: int) -> Read:
    def read(data: dict) -> Any:
        found = LOGGED_LAYERS.search(_at(LOGGED_LINE)(data) or "")
        return int(found.group(which)) if found else None

    return read


def _board_power(data: dict) -> Any:
    """The datasheet's default power limit of the board the probe read (else the workload's hardware): the limit
    it sustains its rated clocks under, against which an enforced limit set lower caps them."""
    from diagnoser.models.hardware import hardware_presets, match_hardware

    for path in ("observations.probe.gpu_name", "workload.hardware"):
        name = _at(path)(data)
        if isinstance(name, str):
            board = hardware_presets().get(name.lower()) or match_hardware(name)
            if board is not None:
                return board.board_power_w
    return None


# Features a build or platform gate turns off, by how their names are written: graph capture (CUDA or HIP
# graphs, the engine's name for replaying captured steps) and the custom all-reduce kernel.
GATED = {
    "cuda_graphs": re.compile(r"\b(?:cuda|hip)\s*graphs?\b|\bgraph (?:capture|replay)\b", re.IGNORECASE),
    "custom_allreduce": re.compile(r"\bcustom[ _-]?all[ _-]?reduce\b", re.IGNORECASE),
}


def _gated_off(setting: str) -> Read:
    def read(data: dict) -> Any:
        return False if GATED[setting].search(_at("observations.platform.feature_gated_off")(data) or "") else None

    return read


# An engine's line saying it captures the step piecewise (vLLM: "setting cudagraph_mode=PIECEWISE" when a backend
# cannot be captured whole, SGLang's piecewise CUDA graph), or falls back to it: the pieces leave ops launched eagerly.
PIECEWISE = re.compile(r"(?:cuda\s*graph|cudagraph)[ _]?mode\s*[=:]\s*piecewise\b"
                       r"|(?:fall(?:s|ing)?\s*back|downgrad\w*|revert\w*|using|setting)\s+(?:to\s+)?piecewise\b", re.IGNORECASE)


def _piecewise_logged(data: dict) -> Any:
    return "partial" if PIECEWISE.search(_at(LOGGED_LINE)(data) or "") else None


# An engine's line saying it compiles graphs again while it serves (torch.compile's "Recompiling function", an HPU's
# graph recompilation, a new shape compiled during decode): the step it recompiles for has no graph to replay.
RECOMPILING = re.compile(r"\brecompil\w*\b.*\b(?:graphs?|shapes?|functions?|dynamo)\b"
                         r"|\b(?:graphs?|shapes?|dynamo)\b.*\brecompil\w*", re.IGNORECASE)


def _recompiling_logged(data: dict) -> Any:
    return False if RECOMPILING.search(_at(LOGGED_LINE)(data) or "") else None


# Ollama's `ollama ps` PROCESSOR column, which its users paste as it is: "11%/89% CPU/GPU", or "100% CPU".
OLLAMA_SPLIT = re.compile(r"\b(\d{1,3})%\s*/\s*(\d{1,3})%\s*CPU\s*/\s*GPU\b|\b(100)%\s*CPU\b", re.IGNORECASE)


def _host_share(data: dict) -> Any:
    found = OLLAMA_SPLIT.search(_at(LOGGED_LINE)(data) or "")
    if found is None:
        return None
    return int(found.group(1) or found.group(3)) / 100


# vLLM's and SGLang's warning when the fused-MoE kernel finds no tuned config for this GPU and shape.
DEFAULT_MOE_CONFIG = re.compile(r"\busing default (?:fused[ _-]?)?moe config\b", re.IGNORECASE)


def _untuned_moe(data: dict) -> Any:
    if DEFAULT_MOE_CONFIG.search(_at(LOGGED_LINE)(data) or ""):
        return [{"kernel_class": "moe", "tuned_config": False}]
    return None


# The names operating systems give their power-saving modes, as people write the mode they were in.
POWER_SAVING = re.compile(r"\blow[ -]power mode\b|\bbattery saver\b|\bpower[ -]?saver\b|\bpowersave\b|\beco mode\b",
                          re.IGNORECASE)


# How people and logs say the GPUs have no peer access: NCCL's switch, or peer-to-peer named as disabled or missing.
NO_PEER_ACCESS = re.compile(
    r"\bNCCL_P2P_DISABLE\s*=\s*1\b|\bno\s+(?:p2p|peer[- ]to[- ]peer)\b"
    r"|\b(?:p2p|peer[- ]to[- ]peer)(?:\s+access)?\s+(?:is\s+)?(?:disabled|off|unavailable|unsupported|not supported)\b",
    re.IGNORECASE)


def _no_peer_access(data: dict) -> Any:
    return False if NO_PEER_ACCESS.search(_at("observations.server.interconnect")(data) or "") else None


# How people name the link between devices, by kind. A link named as absent ("no NVLink") is not that link; a text
# naming links of two kinds (NVLink inside a node, InfiniBand between nodes) does not say which the collectives cross.
LINK_KINDS = (
    ("nvlink", re.compile(r"\bnvlink\b|\bnvswitch\b|\bnvl\d+\b", re.IGNORECASE)),
    ("xgmi", re.compile(r"\bxgmi\b|\binfinity fabric\b", re.IGNORECASE)),
    ("pcie", re.compile(r"\bpci-?e\b|\bpci express\b|\bplx\b", re.IGNORECASE)),
    ("network", re.compile(r"\bethernet\b|\b\d+\s*gbe\b|\broce\b|\binfiniband\b|\brdma\b|\btcp\b|\bthunderbolt\b"
                           r"|\bwi-?fi\b|\blan\b|\bbetween (?:nodes|machines|hosts)\b|\bconnectx\b|\befa\b", re.IGNORECASE)),
)
NO_LINK = re.compile(r"\b(?:no|without)\s+(?:nvlink|nvswitch|xgmi)\b", re.IGNORECASE)


def _link_kind(data: dict) -> Any:
    text = NO_LINK.sub("", _at("observations.server.interconnect")(data) or "")
    kinds = {kind for kind, named in LINK_KINDS if named.search(text)}
    return kinds.pop() if len(kinds) == 1 else None


def _quantized_weights(data: dict) -> Any:
    """A weight format under 16 bits is a quantized one; a case whose runs compare settings already measures what
    changed, so the pinned format stays the bound's there."""
    from diagnoser.models.precision import bytes_per_element

    weights = _at("workload.precision.weights")(data)
    if weights is None or _at("observations.runs")(data) or bytes_per_element(weights) >= 2:
        return None
    return weights


# A quantization or KV-cache setting, where it names one storage format the bound counts. K-quants and other
# mixed or sub-4-bit formats (q5_k, q6_k, q3_k, iq2, 2.5 bpw, turbo3) have no such format and stay unsaid.
WEIGHT_FORMATS = (
    ("mxfp4", re.compile(r"\bmxfp4\b")),
    ("nvfp4", re.compile(r"\bnvfp4\b")),
    ("fp8", re.compile(r"\b(?:fp8|w8a8|e4m3)\b")),
    ("int8", re.compile(r"\b(?:int8|q8_0|8-?bit|w8a16)\b")),
    ("int4", re.compile(r"\b(?:int4|awq|gptq|q4_0|q4_k(?:_[ms])?|4-?bit|w4a16)\b")),
    ("fp16", re.compile(r"\b(?:fp16|f16|float16)\b")),
    ("bf16", re.compile(r"\b(?:bf16|bfloat16)\b")),
)


def _one_format(path: str, data: dict) -> str | None:
    """The one storage format a setting names, where no runs compare settings (a format on both sides of an A/B is
    not what separates them, and the pinned one stays the bound's)."""
    named = {fmt for fmt, pattern in WEIGHT_FORMATS if pattern.search(str(_at(path)(data) or "").lower())}
    return named.pop() if len(named) == 1 and not _at("observations.runs")(data) else None


def _served_kv(data: dict) -> Any:
    return _one_format("observations.server.kv_cache_dtype", data)


def _served_weights(data: dict) -> Any:
    """The weights' format from the engine's quantization setting, where it names exactly one; not for a model whose
    published checkpoint states its own formats (those, part by part, are the bound's where no weight format is
    pinned)."""
    from diagnoser.models.model_spec import resolve_model

    served = _one_format("observations.server.quantization", data)
    if served is None:
        return None
    model = _at("workload.model")(data)
    try:
        if model is not None and resolve_model(model).checkpoint_precision is not None:
            return None
    except InputError:
        pass
    return served


def _power_saving(data: dict) -> Any:
    return True if POWER_SAVING.search(_at("observations.platform.os")(data) or "") else None


# Windows' name for device allocations its WDDM driver placed in host memory, as Task Manager shows it and people
# write it beside the figure: "Shared GPU memory 0.6 GB", "shared GPU memory in use, 0.61-0.98 GB" (a range: its
# least is what surely lay there). Unified-memory oversubscription is stated as the field itself.
SHARED_GPU_MEMORY = re.compile(
    r"\bshared gpu memory\b[^0-9]{0,40}?(\d+(?:\.\d+)?)(?:\s*(?:-|to)\s*\d+(?:\.\d+)?)?\s*(gi?b|mi?b)\b", re.IGNORECASE)


def _shared_gpu_memory(path: str) -> Read:
    def read(data: dict) -> Any:
        found = SHARED_GPU_MEMORY.search(_at(path)(data) or "")
        if found is None:
            return None
        amount = float(found.group(1))
        return amount / 1024 if found.group(2).lower().startswith("m") else amount

    return read


# How engines log a device left with no memory after the load: "VRAM exhausted", "GPU memory exhausted", "0 MiB free".
DEVICE_FULL = re.compile(r"\b(?:vram|gpu memory|device memory)\s+(?:is\s+)?exhausted\b|(?<![\d.])0(?:\.0+)?\s*mi?b\s+free\b",
                         re.IGNORECASE)


def _device_full(data: dict) -> Any:
    return True if DEVICE_FULL.search(_at(LOGGED_LINE)(data) or "") else None


# Windows' display driver model pages device allocations that do not fit into host memory (its sysmem fallback) rather
# than failing them, and WSL2 runs CUDA through the same driver; named as the system is.
WDDM = re.compile(r"\bwindows\b|\bwsl2?\b|\bwddm\b", re.IGNORECASE)


def _wddm(data: dict) -> Any:
    return True if WDDM.search(_at("observations.platform.os")(data) or "") else None


# The programming interface each vendor's accelerators run a model through, by the vendor word a preset's name
# starts with: every preset is an accelerator, so a device pinned to one runs the model off the CPU unless a case
# says otherwise.
VENDOR_API = {"nvidia": "cuda", "amd": "rocm", "apple": "metal", "intel": "xpu", "google": "tpu"}


def _preset_api(data: dict) -> Any:
    from diagnoser.models.hardware import hardware_preset

    name = _at("workload.hardware")(data)
    if not name:
        return None
    try:
        vendor = hardware_preset(name).name.split()[0].lower()
    except InputError:
        return None
    return VENDOR_API.get(vendor)


def _metal(data: dict) -> Any:
    """Apple's unified memory: the GPU keeps resident only the share of memory the system lets it wire, and buffers
    beyond it are paged (compressed, swapped) by the system rather than refused, as Windows' sysmem fallback does."""
    return True if str(_at("observations.platform.device_api")(data) or "").lower() == "metal" else None


# Printed rates and latencies are rounded; within 3 % a rate is the output over the request's time.
SAME_RATE = 0.03


# A prompt under this share of the output cannot move a whole request's rate beyond streaming jitter: a prompt token
# costs under four decode steps (rates.PROMPT_TOKEN_STEPS), against the 25 % the timing agreement allows.
NEGLIGIBLE_PROMPT_SHARE = 1 / 16


def _prompt_negligible(data: dict, tokens: Any) -> bool:
    """The prompt, stated or bounded by one stream's mean context (which a prompt never exceeds), is too short beside
    the output to show in a rate over the whole request."""
    metrics = _at("observations.metrics")(data) or {}
    context = _at("workload.context")(data)
    prompt = metrics.get("input_tokens") or (context.get("mean") if isinstance(context, dict) else context)
    return isinstance(prompt, (int, float)) and bool(tokens) and prompt < NEGLIGIBLE_PROMPT_SHARE * tokens


def _rate_over_request(data: dict) -> Any:
    """A stream's rate that equals its output tokens over the whole request's latency counts the time to the
    first token (queueing, prefill) as if it were decode. One stream's aggregate rate is its own rate. With one
    stream, the run's wall time holding exactly one request's output is that request's latency."""
    metrics = _at("observations.metrics")(data) or {}
    rate = metrics.get("per_user_tokens_per_s")  # one stream's aggregate rate already filled in as its own
    latency_ms, tokens = _typical(metrics, "request_latency_ms"), metrics.get("output_tokens")
    if latency_ms is None and metrics.get("duration_s") and _one_stream(data) and not _prompt_negligible(data, tokens):
        latency_ms = metrics["duration_s"] * 1e3
    if not (rate and latency_ms and tokens):
        return None
    return True if abs(rate * latency_ms / 1e3 / tokens - 1) <= SAME_RATE else None


def _one_stream(data: dict) -> bool:
    """One request in flight: a concurrency, or a workload batch, of one."""
    metrics = _at("observations.metrics")(data) or {}
    return metrics.get("concurrency") == 1 or (metrics.get("concurrency") is None and _at("workload.batch")(data) == 1)


def _one_stream_rate(data: dict) -> Any:
    """With one request in flight the aggregate rate is that stream's."""
    metrics = _at("observations.metrics")(data) or {}
    return metrics.get("output_tokens_per_s") if _one_stream(data) else None


EQUIVALENCES: tuple[Equivalence, ...] = (
    Equivalence("observations.graph.max_captured_batch", "the largest batch the engine captured a graph for", (
        _largest("observations.graph.captured_batch_sizes"),
        same("observations.server.cuda_graph_max_batch"),
    )),
    Equivalence("observations.graph.live_batch_size", "sequences decoding together on one rank", (
        Alternative("workload.batch", _batch_per_rank, "the group-wide batch over the data-parallel ranks"),
        Alternative("observations.metrics.running_sequences", _running, "rounded to whole sequences"),
        Alternative("observations.metrics.requests_per_s", _in_flight,
                    "Little's law: requests per second x each request's time (its latency, else output tokens x TPOT + TTFT), "
                    "at most max_num_seqs"),
    ), only_with="observations.graph"),
    Equivalence("observations.boundaries.client_receipt_ms", "the median gap between chunks at the client", (
        same("observations.boundaries.client_p50_ms"),
        Alternative("observations.metrics", _client_step,
                    "a stream's TPOT (mean else median) read at the client, times the tokens per chunk, beside a device step"),
    )),
    Equivalence("observations.stream.bursty", "the client reads the stream in bursts", (
        Alternative("observations.stream.near_zero_gap_fraction", _near_zero_gaps,
                    "true when a fifth or more of the stream's chunk gaps are too short to be a step"),
    )),
    Equivalence("observations.metrics.tokens_per_chunk", "tokens each streamed chunk carries", (
        Alternative("observations.boundaries.tokens_per_chunk", _client_chunking,
                    "the client's tokens per chunk, for serving figures read at the client (an engine counts its own tokens)"),
    ), only_with="observations.metrics"),
    Equivalence("observations.boundaries.server_emission_ms", "the gap between a stream's tokens as the server sends them", (
        Alternative("observations.metrics.itl_ms", _engine_interval, "the server's inter-token latency (p50, else mean), behind a stream whose chunks came 4 or more a burst"),
    ), only_with="observations.boundaries.client_p99_ms"),
    Equivalence("observations.boundaries.device_step_ms", "the engine's step cadence: the time between one stream's tokens as the engine makes them", (
        Alternative("observations.metrics", _engine_step,
                    "the engine's own per-token time (TPOT, else ITL, mean else median, else 1 / per-stream rate) read at the engine"),
    ), only_with="observations.boundaries.client_receipt_ms"),
    Equivalence("observations.speculation.acceptance_rate", "accepted draft tokens over drafted tokens", (
        Alternative("observations.speculation.mean_accepted_per_cycle", _accepted_rate, "(tokens per cycle - 1) / draft length"),
    )),
    Equivalence("observations.server.speculative_active", "speculation proposes and verifies drafts (false: configured but inactive)", (
        _no_drafts("observations.speculation.drafted_per_cycle", 0, "no tokens drafted a cycle"),
        _no_drafts("observations.graph.query_tokens_per_sequence", 1, "one query token a sequence per step: no drafts verified"),
    ), only_with="observations.server.speculative"),
    Equivalence("observations.host.itl_spike_ratio", "the worst gap between tokens against the typical one", (
        Alternative("observations.metrics.itl_ms", _spike_ratio("observations.metrics.itl_ms", "p99", "p50"), "p99 / p50"),
        Alternative("observations.boundaries", _spike_ratio("observations.boundaries", "client_p99_ms", "client_receipt_ms"),
                    "client_p99_ms / client_receipt_ms"),
        Alternative("observations.metrics.itl_ms", _spike_ratio("observations.metrics.itl_ms", "mean", "p50"),
                    "mean / p50 where no p99 is given: the worst gap is at least the mean, and a mean several times the "
                    "median is time held in a few long gaps"),
    )),
    Equivalence("observations.server.cuda_graphs", "decode steps replayed from captured graphs (false: launched one by one)", (
        Alternative("observations.platform.feature_gated_off", _gated_off("cuda_graphs"),
                    "the feature the build or platform gated off is graph capture (CUDA or HIP graphs)"),
    )),
    Equivalence("observations.server.custom_allreduce", "the engine's custom all-reduce kernel in use (false: NCCL's)", (
        Alternative("observations.platform.feature_gated_off", _gated_off("custom_allreduce"),
                    "the feature the build or platform gated off is the custom all-reduce"),
    )),
    Equivalence("observations.probe.peer_access", "the GPUs read each other's memory directly (false: through host memory)", (
        Alternative("observations.server.interconnect", _no_peer_access,
                    "the interconnect names peer-to-peer as disabled or missing (P2P disabled, no P2P, NCCL_P2P_DISABLE=1)"),
    )),
    Equivalence("observations.server.link", "the kind of link the devices' collectives cross", (
        Alternative("observations.server.interconnect", _link_kind,
                    "the interconnect as written, by the one kind of link it names (NVLink/NVSwitch, xGMI, PCIe or a PLX "
                    "switch, or a network: Ethernet, RoCE, InfiniBand, RDMA, TCP, Thunderbolt, Wi-Fi, a link between nodes); "
                    "a link named as absent (no NVLink) does not count"),
    )),
    Equivalence("observations.probe.default_power_limit_w", "the board's default power limit", (
        Alternative("observations.probe.gpu_name", _board_power,
                    "the datasheet board power of the preset the probe's GPU name (else workload.hardware) matches"),
    ), only_with="observations.probe.power_limit_w"),
    Equivalence("observations.kernel_classes", "kernel classes of the step", (
        Alternative(LOGGED_LINE, _untuned_moe,
                    "the engine's 'Using default MoE config' warning: a fused-MoE class without a tuned config (no share known)"),
    )),
    Equivalence("workload.precision.weights", "the format the weights are stored and read in", (
        Alternative("observations.server.quantization", _served_weights,
                    "the engine's quantization setting where it names one storage format (fp8, w8a8: fp8; int8, q8_0: "
                    "int8; awq, gptq, int4, q4_0, q4_k, 4-bit: int4; mxfp4; nvfp4; fp16; bf16), unless the model's "
                    "published checkpoint states its own formats or runs compare formats"),
    ), only_with="workload"),
    Equivalence("workload.precision.kv_cache", "the format the KV cache is stored and read in", (
        Alternative("observations.server.kv_cache_dtype", _served_kv,
                    "the engine's KV-cache format where it names one the bound counts (fp8; q8_0, int8: int8; q4_0: "
                    "int4; nvfp4; bf16; fp16), unless runs compare settings"),
    ), only_with="workload"),
    Equivalence("observations.server.quantization", "the weight format served", (
        Alternative("workload.precision.weights", _quantized_weights,
                    "the pinned weights' format, when it is narrower than 16 bits and no runs compare formats"),
    ), only_with="observations.server"),
    Equivalence("observations.platform.power_saving", "an OS power-saving mode was on", (
        Alternative("observations.platform.os", _power_saving,
                    "the OS setting names a power-saving mode (Low Power Mode, battery saver, power saver, powersave, eco mode)"),
    )),
    Equivalence("observations.graph.status", "how much of the decode step replays from captured graphs", (
        Alternative(LOGGED_LINE, _piecewise_logged,
                    "the engine's line setting a piecewise graph mode (cudagraph_mode=PIECEWISE, falling back to piecewise): partial"),
    )),
    Equivalence("observations.graph.replayed_at_live_batch", "the live batch's steps replay a captured graph", (
        Alternative(LOGGED_LINE, _recompiling_logged,
                    "the engine's line saying it recompiles graphs or shapes while serving (Recompiling function, graph "
                    "recompilation during decode): false"),
    )),
    Equivalence("observations.memory.requests_beyond_cache", "requests in flight beyond those the KV cache holds whole", (
        Alternative("observations.server.kv_cache_tokens", _beyond_cache,
                    "metrics.concurrency less the cache's tokens (server.kv_cache_tokens) over a request's prompt and output "
                    "tokens (metrics.input_tokens + metrics.output_tokens), rounded down; only where it is more than none"),
    )),
    Equivalence("observations.memory.weights_on_host_fraction", "share of the model held in host memory", (
        Alternative(LOGGED_LINE, _host_share, "Ollama's `ollama ps` PROCESSOR column: N%/M% CPU/GPU"),
    )),
    Equivalence("observations.memory.spilled_to_host_gb", "device allocations the driver placed in host memory", (
        Alternative("observations.platform.os", _shared_gpu_memory("observations.platform.os"),
                    "the OS setting names Windows' shared GPU memory in use, with its size (a range's least)"),
        Alternative(LOGGED_LINE, _shared_gpu_memory(LOGGED_LINE), "a pasted line naming shared GPU memory in use, with its size"),
    )),
    Equivalence("observations.memory.device_memory_full", "no device memory was left once the model loaded", (
        Alternative(LOGGED_LINE, _device_full, "a logged line saying the device's memory is exhausted, or 0 MiB free"),
    )),
    Equivalence("observations.platform.device_api", "the interface the model runs through (cpu: on the host's cores)", (
        Alternative("workload.hardware", _preset_api,
                    "the accelerator preset the pinned device matches, by its vendor: NVIDIA cuda, AMD rocm, Apple metal, "
                    "Intel xpu, Google tpu"),
    )),
    Equivalence("observations.platform.sysmem_fallback", "the driver places what does not fit the device in host memory", (
        Alternative("observations.platform.os", _wddm, "the system is Windows (or WSL2, or names WDDM): its display driver's sysmem fallback"),
        Alternative("observations.platform.device_api", _metal, "the device is Apple's GPU (metal): the system pages what it may not wire"),
    )),
    Equivalence("observations.memory.layers_on_device", "model layers placed on the device", (
        Alternative(LOGGED_LINE, _logged_layers(1), "llama.cpp's load line: offloaded N/M layers to GPU"),
    )),
    Equivalence("observations.memory.layers_total", "model layers in all", (
        Alternative(LOGGED_LINE, _logged_layers(2), "llama.cpp's load line: offloaded N/M layers to GPU"),
    )),
    Equivalence("observations.metrics.per_user_tokens_per_s", "tokens per second of one stream", (
        Alternative("observations.metrics.output_tokens_per_s", _one_stream_rate,
                    "the aggregate rate, with one request in flight (metrics.concurrency, else workload.batch, of 1)"),
    ), only_with="observations.metrics"),
    Equivalence("observations.boundaries.itl_growth_ms_per_1k_output", "how much each step grows per 1k tokens generated", (
        Alternative("observations.runs", _growth_across_outputs,
                    "runs differing only in output length, slower per token the longer (5 % or more end to end): twice "
                    "the slope of the time per token against the length"),
    )),
    Equivalence("observations.metrics.window_includes_warmup", "the timed window holds the warm-up after a start", (
        Alternative("observations.runs", _warm_up_across_runs,
                    "runs differing only in one setting, 5 % or more apart, the slower written as the first after a start "
                    "(first, cold, boot, startup, initial, fresh) and the faster as a run after it (warm, repeat, second, "
                    "subsequent, steady, again), or numbered by a setting that orders the runs (run_order 1 against 2), "
                    "or a warm-up setting off against on"),
    ), only_with="observations.metrics"),
    Equivalence("observations.expected.window_includes_warmup", "the reference's window holds a warm-up too", (
        Alternative("observations.runs", _warm_reference,
                    "false when the runs hold a first run after a start and a run after it (as for "
                    "`metrics.window_includes_warmup`): the reference was read warm"),
    ), only_with="observations.expected"),
    Equivalence("observations.metrics.rate_includes_prefill", "the rate counts a per-request time beside decode", (
        Alternative("observations.runs", _fixed_cost_per_request,
                    "runs differing only in output length: the time per token falls as the output grows"),
        Alternative("observations.runs", _prefill_across_prompts,
                    "runs differing only in a short prompt (1024 tokens at most), timed by a stream's rate, 2x or more apart"),
        Alternative("observations.metrics", _rate_over_request,
                    "the rate is the output tokens over the request latency, or over one stream's run time (within 3 %)"),
    ), only_with="observations.metrics"),
)


def _set(data: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = data
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def canonical(case: Case) -> Case:
    """The case with every canonical field it leaves empty filled from an equivalent statement."""
    data = case.model_dump(mode="json", exclude_none=True, exclude_unset=True)
    filled: dict[str, str] = {}
    read_from_log: list[str] = []
    for eq in EQUIVALENCES:
        if _at(eq.canonical)(data) is not None or (eq.only_with and _at(eq.only_with)(data) is None):
            continue
        for alt in eq.alternatives:
            value = alt.read(data)
            if value is not None:
                _set(data, eq.canonical, value)
                stated = case.sources.get(alt.path)
                filled[eq.canonical] = f"{alt.path}" + (f" ({alt.how})" if alt.how else "") + (f", from {stated}" if stated else "")
                if alt.path == LOGGED_LINE:
                    read_from_log.append(eq.canonical)
                break
    if not filled:
        return case
    if read_from_log:
        _set(data, "observations.platform.fallback_read_as", sorted(read_from_log))
    data["sources"] = {**data.get("sources", {}), **filled}
    return Case.model_validate(data)


def alternative_paths() -> set[str]:
    """Every documented alternative: a field that feeds a canonical fact."""
    return {alt.path for eq in EQUIVALENCES for alt in eq.alternatives}
