"""What A/B runs say: a slowdown that follows one changed setting is located there.

Most reports carry a comparison, not a trace: two versions, a flag on and off, a sweep. When
exactly one named setting differs, the measured delta belongs to that change, which bounds
the most that undoing or fixing it can buy; it says where the time went, not what spends it,
so it ranks after a mechanism with equal evidence. When several settings differ the delta
cannot be pinned on any one of them.
"""

import re

from diagnoser.engine import AS, MATCH, OR, P, TEST, ConfoundedChange, Finding, Grade, RuleSet, RunDiff, ev, load_specs, rule
from diagnoser.engine.comparison import OFF, same_run
from diagnoser.models.hardware import device_parts
from diagnoser.models.serving import WORKLOAD_SETTINGS

SPECS = load_specs(__file__)

# Serving benchmarks repeat within a few percent; a 5 % slower run on the same figure is a change.
SLOWER = 1.05
# Where the runs state how far their own repeats moved, a difference twice the wider spread lies outside both runs'
# bands (each run's repeats span at most the spread): a change, however small against SLOWER.
BEYOND_REPEATS = 2.0
# A mean per-token time over a benchmark repeats within about two per cent on one machine: a few per cent slower,
# below SLOWER and with no repeats stated, is the runs' only lead but no measurement yet.
SLIGHTLY_SLOWER = 1.025
# An observed token at least twice the slower side of an A/B is not either side's: that A/B is an experiment beside it.
APART = 2.0


def slower_beyond_noise(d, ratio: float) -> bool:
    """Slower than serving benchmarks repeat, or than these runs' own repeats when they state them."""
    spread = d.get("repeat_spread")
    return ratio >= SLOWER or (spread is not None and ratio - 1 >= BEYOND_REPEATS * spread)


def as_number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def larger(slower: str, faster: str) -> bool:
    """The slower run has the larger numeric value (more threads, a longer configured context)."""
    a, b = as_number(slower), as_number(faster)
    return a is not None and b is not None and a > b


# Settings that size a device allocation: work may follow them, and a larger one may no longer fit the device.
SIZED = frozenset({"max_context", "kv_cache_capacity"})


def beyond_the_size(d) -> float:
    """The slower run's time beyond what work sized by the larger setting could add. Work that follows a size (the
    configured maximum context, the allocated cache) grows at most in proportion to it, all the step at worst, so the
    larger size can stretch the faster run's time at most by the sizes' ratio; what the slower run took beyond that
    came with the size some other way (the larger allocation no longer fitting the device). 0 within the ratio."""
    ratio = as_number(d["slower"]) / as_number(d["faster"])
    return max(0.0, d["slower_time"] - d["faster_time"] * ratio)


# Thread counts written as the engine's choice: it takes the cores it counts, so at least any explicit count.
ENGINE_THREADS = frozenset({"default", "auto"})
# Thread counts written as every core the OS counts, SMT siblings included: a count below one (-1 is the usual
# spelling) or words that say so. No engine's own choice takes more.
EVERY_LOGICAL_CORE = re.compile(r"^\s*-\d|\b(all|max|logical|hyperthreads?)\b")


def thread_rank(value: str) -> tuple[int, float] | None:
    """Where a written thread count stands: an explicit count by its number, below the engine's choice, below every
    logical core; None when the text says neither."""
    if EVERY_LOGICAL_CORE.search(value):
        return (2, 0.0)
    if value in ENGINE_THREADS:
        return (1, 0.0)
    count = as_number(value)
    return (0, count) if count is not None else None


def more_threads(slower: str, faster: str) -> bool:
    """The slower run ran more threads: a larger count, the engine's default against an explicit count, or every
    logical core against either."""
    a, b = thread_rank(slower), thread_rank(faster)
    return a is not None and b is not None and a > b


def wider_affinity(slower: str, faster: str) -> bool:
    """The slower run's threads could run on more cores: every core against a set, or more cores counted."""
    every = EVERY_LOGICAL_CORE.search(slower) is not None and EVERY_LOGICAL_CORE.search(faster) is None
    return every or larger(slower, faster)


def switched_on(slower: str, faster: str) -> bool:
    """The slower run has the feature on."""
    return slower in {"true", "on", "yes", "1"} and faster in OFF


def switched_off(slower: str, faster: str) -> bool:
    return switched_on(faster, slower)


def any_change(slower: str, faster: str) -> bool:
    return True


# How a run with nothing in between is written.
DIRECT = OFF | {"direct"}


def through_a_proxy(slower: str, faster: str) -> bool:
    """The slower run went through a proxy or gateway, the faster one straight to the server."""
    return faster in DIRECT and slower not in DIRECT


# How a split of each layer's matmuls over the devices is written (llama.cpp's row, ExLlama's and vLLM's tensor).
TENSOR_SPLIT = frozenset({"tensor", "row", "tp", "tensor_parallel"})


def split_by_tensor(slower: str, faster: str) -> bool:
    """The slower run split every layer over the devices, the faster one split by whole layers (or not at all)."""
    return slower in TENSOR_SPLIT and faster not in TENSOR_SPLIT


# How a split by whole layers is written (llama.cpp's layer, a pipeline's stages).
LAYER_SPLIT = frozenset({"layer", "layers", "pipeline", "pp", "pipeline_parallel"})


def split_by_layer(slower: str, faster: str) -> bool:
    """The slower run split the model by whole layers, the faster one every layer over the same devices: the layer
    split passes one token through the devices in turn, the tensor split has them all read at once."""
    return slower in LAYER_SPLIT and faster in TENSOR_SPLIT


def device_count(value: str) -> float | None:
    """How many devices a written value names: a plain number, or the parts of a list, each counted by its leading
    count (2x ..., 2 ..., two ...) or as one."""
    count = as_number(value)
    if count is not None:
        return count
    parts = device_parts(value)
    return float(sum(n for n, _ in parts)) if parts else None


def device_kinds(value: str) -> set[str]:
    """The kinds of device a written list names, counts dropped ("1x RTX 3090 + 2x RTX 3060": two kinds)."""
    return {name for _, name in device_parts(value) if name}


def more_devices(slower: str, faster: str) -> bool:
    """The slower run spread the model over more devices."""
    a, b = device_count(slower), device_count(faster)
    return a is not None and b is not None and a > b


def unlike_devices_added(slower: str, faster: str) -> bool:
    """The slower run added devices of another kind than the faster run's: the model spread over unlike devices."""
    return more_devices(slower, faster) and len(device_kinds(slower)) > 1


# The bits per element a format's name states: its first number (q8_0, fp8, bf16, turbo4, int4, iq3_xxs).
FORMAT_BITS = re.compile(r"\d+")


def format_bits(name: str) -> int | None:
    """The width a format's name states, or None where it states none (auto: the model's own dtype)."""
    found = FORMAT_BITS.search(name)
    return int(found.group()) if found is not None else None


def narrower(slower: str, faster: str) -> bool:
    """The slower run stores fewer bits per element: a format that moves fewer bytes yet runs slower is paid in its
    kernels. A name with no number (auto: the model's own dtype) says nothing of its width."""
    a, b = format_bits(slower), format_bits(faster)
    return a is not None and b is not None and a < b


def beyond_its_bytes(d) -> bool:
    """A weight format's A/B is its kernels' when the slower format's extra bits do not account for the delta: it
    stores no more bits per element than the faster one (or a width its name does not state), or it is slower by more
    than the ratio of their widths (the most its extra bytes can cost a step that only reads them)."""
    a, b = format_bits(d["slower"]), format_bits(d["faster"])
    if a is None or not b:
        return True
    return d["slowdown"] > a / b


def heavier_format(d) -> bool:
    """The slower side of a weight format's A/B stores more bits per element, as its name states."""
    a, b = format_bits(d["slower"]), format_bits(d["faster"])
    return a is not None and b is not None and a > b


# How a run without a tuned config is written: as a run with nothing in between, or as the engine's default.
UNTUNED = (DIRECT - {"direct"}) | {"default"}


def untuned(slower: str, faster: str) -> bool:
    """The slower run had no tuned config (the engine's default), the faster one a tuned one."""
    return slower in UNTUNED and faster not in UNTUNED


# How a placement in host memory is written, against the device's own memory.
HOST_MEMORY = frozenset({"host", "cpu", "host_memory", "system_memory", "cpu_memory", "ram", "dram", "pinned"})


def held_on_the_host(slower: str, faster: str) -> bool:
    """The slower run held it in host memory, the faster one on the device."""
    return slower in HOST_MEMORY and faster not in HOST_MEMORY


def fewer(slower: str, faster: str) -> bool:
    """The slower run has the smaller numeric value (fewer layers on the device)."""
    return larger(faster, slower)


# A memory size as people write it: 16, 16GB, 18 GiB, 0.5 TB.
MEMORY_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(t|g|m)?i?b?\s*$", re.IGNORECASE)
GB_PER_UNIT = {"t": 1024.0, "g": 1.0, "m": 1 / 1024, None: 1.0}


def memory_gb(value: str) -> float | None:
    found = MEMORY_SIZE.match(value)
    return None if found is None else float(found.group(1)) * GB_PER_UNIT[found.group(2) and found.group(2).lower()]


def less_memory(slower: str, faster: str) -> bool:
    """The slower run had the device with less memory."""
    a, b = memory_gb(slower), memory_gb(faster)
    return a is not None and b is not None and a < b


# Settings that set a processor's clocks or the power it may draw: a power mode or cap (nvpmodel, a power limit), a clock
# lock (jetson_clocks, locked clocks), a frequency governor or the CPU's own frequency control (Speed Shift), a
# power-saving mode. They change no work, only the clocks it runs at, so the slower side of their A/B ran slower clocks.
CLOCK_SETTINGS = ("power_mode", "nvpmodel", "power_limit", "jetson_clocks", "clocks_locked", "locked_clocks", "cpu_governor",
                  "governor", "cpu_speed_shift", "power_saving", "low_power_mode")

# Settings whose A/B a mechanism rule reads as a measurement of that mechanism, and which side of
# the change must be the slower one. regression-located leaves these to the mechanism rules, so
# one measured delta is held by one hypothesis.
ABLATIONS = {
    **{name: any_change for name in CLOCK_SETTINGS},  # clock-throttle
    "cuda_graphs": switched_off,  # graphs-off (compile-off on a CPU, where the eager flag turns compilation off)
    "async_scheduling": switched_off,  # host-overhead: the host's work between steps, which the overlap hides
    "torch_compile": switched_off,  # compile-off
    "attention_backend": any_change,  # slow-attention-backend
    "kernel_backend": any_change,  # slow-kernel-path
    "max_context": larger,  # max-context-work
    "threads": more_threads,  # cpu-oversubscribed
    "cpu_affinity": wider_affinity,  # cpu-oversubscribed: threads on slower cores (E-cores, SMT siblings) hold the others at each barrier
    "proxy": through_a_proxy,  # proxy-buffering: the proxy's hold (or its own queue) is the delta
    "kv_cache_placement": held_on_the_host,  # kv-cache-on-host: every step reads the cache over the host path
    "gpu_layers": fewer,  # cpu-offload: the layers left off the device are read from host memory every step
    "max_num_seqs": fewer,  # admission-queueing: under the lower cap, requests wait for a slot
    "device_memory": less_memory,  # cpu-offload: what no longer fits the smaller memory is read from host memory or paged
    "penalties": switched_on,  # default-penalties when the server's default turns them on, else penalty-over-history
    "structured_output": switched_on,  # structured-output-overhead
    "speculative": switched_on,  # speculation-slowdown (speculation-low-acceptance when the counters show why)
    "draft_length": larger,  # speculation-slowdown: the extra drafts of a longer draft cost more than they are accepted
    "quantization": any_change,  # slow-kernel-path: the format whose bytes do not account for the delta has slow kernels
    "moe_config": untuned,  # moe-untuned-config: the fused-MoE kernel's default tiles for this GPU and shape
    "kv_cache_dtype": narrower,  # slow-kernel-path: attention's kernels for the narrower KV format (dequantising, a fallback)
    "kv_cache_capacity": larger,  # max-context-work: work follows the allocated cache, not the live context
    "tp": larger,  # exposed-comm: each rank reads less, yet the step grew: the added collectives cost more
    "devices": more_devices,  # exposed-comm: as tp, however the model is split: what passes between the devices grew
    "split_mode": split_by_tensor,  # exposed-comm: as tp; a layer split passes activations once per device instead
    "custom_allreduce": switched_off,  # custom-allreduce-off
    "gpu_scheduling": switched_off,  # launch-gaps: the OS on the CPU schedules each submission, the GPU waits for it
    "build": any_change,  # build-mismatch: the same engine built another way, so the binary is what differs
    "lora": switched_on,  # extra-kernels-per-step: the adapters' shrink/expand kernels run on every layer
}


# Settings that say how one copy of the model is spread over devices: their A/Bs are exposed-comm's.
SPREAD_SETTINGS = frozenset({"tp", "devices", "split_mode"})


def idle_through_the_delta(d, busy: float) -> bool:
    """The slower run's device ran kernels (its busy share of its time) no longer than the faster run took in all: what
    the slower run added passed with the device idle. A device waiting on a collective runs the collective's kernel,
    so that time is not spent passing data between devices; it is spent where the device does not see it."""
    return busy * d["slower_time"] <= d["faster_time"]


# Settings whose A/B names a second mechanism when the other side is the slower one.
OTHER_WAY = {
    "split_mode": split_by_layer,  # pipeline-stages-serialize: the devices take the token in turn
    "devices": unlike_devices_added,  # pipeline-stages-serialize: the added, unlike devices' share read in turn
}


def interpreted(setting: str, slower: str, faster: str) -> bool:
    """Whether a mechanism rule owns this delta."""
    return any(wanted is not None and wanted(slower, faster) for wanted in (ABLATIONS.get(setting), OTHER_WAY.get(setting)))


UNITS = {"per_token_ms": "ms per token", "per_user_tokens_per_s": "ms per token", "output_tokens_per_s": "ms per token (aggregate)", "duration_s": "s"}


def _delta_evidence(d) -> list:
    unit = UNITS.get(d["figure"], "")
    return [
        ev("runs.baseline", d["base"]),
        ev("runs.slower", d["other"]),
        ev("runs.figure", d["figure"]),
        ev("runs.baseline_time", d["base_time"], unit),
        ev("runs.slower_time", d["other_time"], unit),
        ev("runs.ratio", d["ratio"]),
    ]


def beside_the_observation(d) -> bool:
    """The observed stream's token takes at least APART times the slower side of this A/B: the A/B is an experiment
    beside the slowdown (a reference engine's thread sweep), not where it happened."""
    return d.get("observed_time", 0.0) >= APART * d["slower_time"]


# Two runs that differ in one named setting (binds d, setting, ratio, before, after).
ONE_SETTING_CHANGED = AS.d << RunDiff(setting=MATCH.setting, ratio=MATCH.ratio, before=MATCH.before, after=MATCH.after)


# Two builds' A/B is build-mismatch's (the binary lacks a fast path) only at a slowdown such a path makes: a missing SIMD
# or arch target, a debug build, a generic fallback for the model's main kernels costs multiples, FAST_PATH_GAP and
# more. A smaller delta between two builds is code that changed on the path (a bisected commit, a kernel library
# bumped), which the A/B locates without naming its mechanism.
FAST_PATH_GAP = 1.3
FAST_PATH_SETTINGS = frozenset({"build"})


def left_to_locate(setting: str, before: str, after: str, ratio: float) -> bool:
    """A single setting of how the work is served, whose delta no mechanism rule reads as its own measurement (two
    builds' owned only from the slowdown a missing fast path makes, FAST_PATH_GAP)."""
    owned = interpreted(setting, after, before) and (setting not in FAST_PATH_SETTINGS or ratio >= FAST_PATH_GAP)
    return setting != "several" and setting not in WORKLOAD_SETTINGS and not owned


class ComparisonRules(RuleSet):
    @rule(
        SPECS["regression-located"],
        ONE_SETTING_CHANGED,
        TEST(lambda d, setting, ratio, before, after: left_to_locate(setting, before, after, ratio) and slower_beyond_noise(d, ratio)),
    )
    def regression_located(self, d, setting, ratio, before, after):
        """Several runs changing the same setting give one hypothesis per setting: the largest delta ranks first."""
        if beside_the_observation(d):
            return None
        spread = [ev("runs.repeat_spread", d["repeat_spread"])] if "repeat_spread" in d else []
        return Finding(
            evidence=[ev("runs.changed", setting), ev("runs.before", before), ev("runs.after", after), *_delta_evidence(d), *spread],
            removable_ms=d["other_time"] - d["base_time"],
            step_ms=d["other_time"],
            key=setting,
            detail=f"Only {setting} differs ({before} -> {after}) and the run is {ratio:.2f}x slower on {d['figure']}; "
            "gains are shares of the slower run's time per unit of work.",
        )

    @rule(
        SPECS["regression-located"],
        ONE_SETTING_CHANGED,
        TEST(lambda d, setting, ratio, before, after: left_to_locate(setting, before, after, ratio)
             and SLIGHTLY_SLOWER <= ratio < SLOWER and "repeat_spread" not in d),
    )
    def regression_within_noise(self, d, setting, ratio, before, after):
        """A change of a few per cent, inside what serving benchmarks are taken to repeat within: the only lead the
        runs give, possible until repeats of both sides show a spread tighter than the delta (then it is measured)."""
        if beside_the_observation(d):
            return None
        return Finding(
            evidence=[ev("runs.changed", setting), ev("runs.before", before), ev("runs.after", after), *_delta_evidence(d)],
            key=setting,
            grade=Grade.possible,
            missing=["runs.repeat_spread"],
            detail=f"Only {setting} differs ({before} -> {after}) and the run is {ratio:.3f}x slower on {d['figure']}, "
            f"under the {SLOWER:g}x benchmarks repeat within: repeats of both sides would tell a change from noise.",
        )

    @rule(
        SPECS["confounded-comparison"],
        RunDiff(setting="several", ratio=MATCH.ratio, changed=MATCH.changed),
        TEST(lambda ratio: ratio >= SLOWER),
    )
    def confounded(self, ratio, changed):
        return Finding(evidence=[ev("runs.changed", ", ".join(changed)), ev("runs.ratio", ratio)])


def ablation(*settings: str, other_way: bool = False) -> tuple:
    """Patterns for a mechanism rule that an A/B of a named setting (any of ``settings``) measures: the runs differ
    only in it (or in it and others: a suspect, ``ablation_finding`` says so), one is slower beyond noise (SLOWER, or
    beyond the runs' own repeats where they state them), and it is
    the run with the mechanism (``ABLATIONS``, or ``OTHER_WAY`` for the mechanism of the other side). Binds ``d``;
    claim with ``ablation_finding``."""
    readings = OTHER_WAY if other_way else ABLATIONS
    named = settings[0] if len(settings) == 1 else P(lambda s: s in settings)
    fields = {"setting": named, "slowdown": MATCH.slowdown, "slower": MATCH.slower, "faster": MATCH.faster}
    return (
        OR(AS.d << RunDiff(**fields), AS.d << ConfoundedChange(**fields)),
        TEST(lambda d, slowdown, slower, faster: slower_beyond_noise(d, slowdown) and readings[d["setting"]](slower, faster)),
    )


def observed_on_the_faster_side(d) -> bool:
    """The observation is the faster run's own figure: the slower side's mechanism (graphs off, the other format) is
    one the observed setup does not take, so however much it cost the other run it is not the observation's gap. It
    stays possible (the engine has that path, and whatever makes it slow may touch the observed one too), unbounded."""
    observed = d.get("observed_time")
    return observed is not None and same_run(d["faster_time"], observed) and not same_run(d["slower_time"], observed)


def ablation_finding(d, *evidence, key: str = "") -> Finding:
    """The measured delta between the two runs, as a share of the slower run's time per unit. When other settings
    changed with this one the delta is not this setting's: the mechanism is a suspect, indicated and unbounded,
    and the check is the run that changes this setting alone."""
    unit = UNITS.get(d["figure"], "")
    confounded = list(d.get("with_") or [])
    own = [*evidence, ev(f"runs[{d['setting']}].slower", d["slower"]), ev(f"runs[{d['setting']}].faster", d["faster"]),
           ev("runs.figure", d["figure"]), ev("runs.slower_time", d["slower_time"], unit),
           ev("runs.faster_time", d["faster_time"], unit)]
    if observed_on_the_faster_side(d):
        return Finding(
            evidence=[*own, ev("runs.observed_time", d["observed_time"], unit)],
            key=key,
            grade=Grade.possible,
            detail=f"{d['slower']} runs {d['slowdown']:.2f}x slower than {d['faster']}, but the observation is {d['faster']}'s "
            "own figure: the engine has the slower path, and the observed setup does not take it.",
        )
    if confounded:
        return Finding(
            evidence=[*own, ev("runs.changed_with_it", ", ".join(confounded))],
            key=key,
            grade=Grade.indicated,
            missing=[f"runs[{d['setting']}]"],
            detail=f"{d['slower']} runs {d['slowdown']:.2f}x slower than {d['faster']} on {d['figure']}, but "
            f"{', '.join(confounded)} changed too: the delta is not this setting's alone until a run changes only {d['setting']}.",
        )
    return Finding(
        evidence=own,
        removable_ms=d["slower_time"] - d["faster_time"],
        step_ms=d["slower_time"],
        key=key,
        detail=f"The runs differ only in {d['setting']}: {d['slower']} is {d['slowdown']:.2f}x slower than {d['faster']} on {d['figure']}.",
    )
