"""Device work that takes longer than its bytes need: small expert GEMMs, untuned or slow kernel paths.

A kernel class can at most shrink to the time its bytes take at full bandwidth, so each
rule claims ``time x (1 - achieved bandwidth fraction)``, or the whole class time when the
fraction was not measured (an upper bound, stated as such).
"""

import re

from diagnoser.engine import (
    AS,
    MATCH,
    NOT,
    OR,
    TEST,
    W,
    Bound,
    Budget,
    Expectation,
    Finding,
    Grade,
    Graph,
    Host,
    HostCostFact,
    KernelClass,
    Layout,
    Memory,
    Metrics,
    P,
    Platform,
    Reference,
    Routing,
    RuleSet,
    RunDiff,
    Server,
    Speculation,
    ev,
    load_specs,
    rule,
)

from diagnoser.rules.comparison import (
    ablation, ablation_finding, beyond_its_bytes, format_bits, larger, observed_on_the_faster_side, switched_on,
)
from diagnoser.rules.context import SPECS as CONTEXT_SPECS
from diagnoser.rules.host_costs import timed_ms
from diagnoser.rules.launch import DRAFT_STEP_SHARE, device_read_idle, host_without_profiler, notable, on_cpu
from diagnoser.rules.machine import heavier_format_past_the_sweep
from diagnoser.rules.output_path import FEWER_TOKENS_WITH_MORE_STREAMS, LONG_PROMPT_TOKENS
from diagnoser.rules.speculation import SPECS as SPECULATION_SPECS
from diagnoser.rules.speculation import (
    ROW_DEARER,
    drafts_dearer_than,
    drafts_per_cycle,
    ordinary_token_ms,
    row_excess_ms,
    yield_per_cycle,
)

SPECS = load_specs(__file__)

# Below this share of device time a kernel class cannot move the step enough to lead.
MIN_SHARE = 0.15
# Under ~16 rows per expert a GEMM is a skinny matrix-vector product: weight reads dominate
# and too few CTAs are in flight to pull full bandwidth.
SMALL_ROWS_PER_EXPERT = 16
# A step at least this many times its floor has room for the expert GEMMs' loss: at a few rows per expert they stream
# their weights at a fraction of the bandwidth the floor assumes.
FAR_FROM_FLOOR = 2.0
# A verify of one stream's k+1 tokens is dearer than its rows make it at twice the ordinary step, and a GEMM of up to 16
# rows still reads its weights rather than computing (the verify step's time is the weights' read).
VERIFY_DEARER = 2.0
VERIFY_ROWS = 16
# Under 60 % of peak bandwidth a weight-streaming kernel is not bandwidth-limited.
LOW_BW_FRACTION = 0.6
# A narrower weight format that speeds one stream up by under half the ratio of the widths is short of its bytes: a step
# that reads the weights once would follow their bytes.
BYTES_SHORTFALL = 2.0
# A backend is a slow path, not merely below par, when it reaches under 1/1.5 of that (40 % of peak).
SLOW_PATH_MARGIN = 1.5
# A served MoE kernel this many times slower than a plain GEMM at the same rows per expert is
# the kernel's doing; inside that margin, packing and routing overheads explain the difference.
BELOW_REFERENCE = 1.25
# A launch costs ~3-10 µs (host submission, or a tiny kernel's GPU time); 32 extra launches per step
# (one per layer of a small model) is already ~0.1-0.3 ms, a few percent of a 5-10 ms decode step.
# Fewer is within step-to-step jitter and within what a model's own glue kernels add.
EXTRA_LAUNCHES = 32
# A fallback path can at most remove its class's time; a class under 5 % of the step cannot move
# it by more than ~1.05x, inside run-to-run noise.
FALLBACK_MIN_SHARE = 0.05
# A grid of under a quarter of the SMs leaves three quarters of the GPU idle while it runs: at a large share of the
# step the kernel is latency-bound on a few SMs (a single-block sampler, a split-free reduction), not bandwidth-bound.
UNDERFILLED = 0.25
# Kernel classes whose small grids have rules of their own: expert GEMMs (small-expert-kernels) and attention
# without split-KV (attention-split-kv-off).
OWN_GRID_RULES = frozenset({"moe", "attention"})
# A tile at least 4x the rows routed to an expert computes >= 75 % padding: sized for prefill or
# large batches, not for decode's few rows per expert.
TILE_PADDING = 4.0
# Sampling kernels above 3 % of the device time are worth their own hypothesis (a full-vocabulary
# sort per sequence is far more than that; a sort-free sampler well under it).
SAMPLING_SHARE = 0.03
# The references that served the same weights in the same format on the same machine: the setup itself on an earlier
# build, or earlier in the same run. (Another configuration may be another format; another machine may lack the
# format's fast kernel.)
SAME_SETUP_EARLIER = frozenset({"older_version", "earlier_in_run"})
# Run settings that put more sequences into one decode step: the batch itself, or the requests in flight.
BATCH_SETTINGS = frozenset({"batch", "concurrency"})
# A logged line that names another part of the step than the weights' GEMMs is that part's: the KV cache (or a
# cache tier holding it), attention, sampling, communication between devices, pipeline stages, graph capture.
OTHER_PART = re.compile(
    r"\b(?:kv|\w*cache|attention|attn|flash[_-]?attn|sampl\w*|top[_-]?[kp]|all[_-]?reduce|nccl|pipeline|cuda ?graphs?|"
    r"cudagraph\w*|tokeni[sz]\w*)\b", re.IGNORECASE)

# What settles a quantized format's GEMMs as the loss, however they came to be suspected.
QUANTIZED_CHECK = "An A/B against unquantized weights at the same batch, or the GEMM class's share of a trace, decides it."
# Words that describe a sampler as sort-free, so "sort-free" is not read as sorting.
SORT_FREE = ("sort-free", "sortfree", "sort_free", "no-sort", "nosort", "without sort", "rejection")


def sorts(sampling: str) -> bool:
    """The sampler is described as sorting (and not as sort-free)."""
    text = sampling.lower()
    return "sort" in text and not any(word in text for word in SORT_FREE)


# Decoding that takes the most likely token sorts nothing, whatever top-k says.
GREEDY = ("greedy", "argmax")


# Nucleus (top-p) sampling keeps the most likely tokens up to a probability mass: the mass is summed in sorted order, so
# a sampler not described as sort-free sorts whatever top-k left it, the whole vocabulary when no top-k cut it first.
TOP_P = re.compile(r"\btop[-_ ]?p\b|nucleus")


def whole_vocabulary_sort(server) -> bool:
    """Configuration that sorts the whole vocabulary per sequence per step: a sorting sampler; top-k off (k <= 0); or
    top-p with no top-k above zero stated; each with a sampler not described as sort-free or greedy."""
    sampling = server.get("sampling") or ""
    if sorts(sampling):
        return True
    text = sampling.lower()
    if any(word in text for word in (*GREEDY, *SORT_FREE)):
        return False
    top_k = server.get("top_k")
    if top_k is not None:
        return top_k <= 0
    return bool(TOP_P.search(text))


def off_expected_path(k) -> bool:
    """A fallback or generic path ran: flagged, or a backend other than the one expected here."""
    if k.get("fallback") is True:
        return True
    backend, expected = k.get("backend"), k.get("expected_backend")
    return backend is not None and expected is not None and backend.strip().lower() != expected.strip().lower()


def headroom_ms(device_ms: float, share: float, bw_fraction: float | None, reference: float = 1.0) -> float:
    """Time a kernel class could lose if it reached ``reference`` of peak bandwidth: full bandwidth,
    or what a plain GEMM reaches at the same shape (all of the class when unmeasured)."""
    class_ms = device_ms * share
    if bw_fraction is None:
        return class_ms
    return class_ms * max(0.0, 1.0 - bw_fraction / reference)


def _slow_backend_finding(k, backend: str, frac: float, removable: float, at_most: bool = False) -> Finding:
    reach = "reaches at most" if at_most else "reaches"
    return Finding(evidence=_kernel_evidence(k), removable_ms=removable, key=k["kernel_class"],
                   detail=f"{k['kernel_class']} on {backend} {reach} {frac:.0%} of peak bandwidth.")


def short_of_its_bytes(wide: str, narrow: str, speedup: float) -> bool:
    """The narrower format's speed-up is under half the ratio of the widths its names state."""
    a, b = format_bits(wide), format_bits(narrow)
    return a is not None and bool(b) and a > b and speedup < a / b / BYTES_SHORTFALL


def few_verify_rows(s) -> bool:
    """The verify runs few enough rows (k drafts and the stream's own token) that reading the weights is its step."""
    k = drafts_per_cycle(s)
    return k is not None and k + 1 <= VERIFY_ROWS


def small_expert_work(k) -> bool:
    underfilled = "grid_ctas" in k and "sm_count" in k and k["grid_ctas"] < k["sm_count"]
    skinny = "tokens_per_expert" in k and k["tokens_per_expert"] < SMALL_ROWS_PER_EXPERT
    slow = k.get("achieved_bw_fraction", 0.0) < LOW_BW_FRACTION
    return (underfilled or skinny) and slow


def split_expert_loss(class_ms: float, achieved: float, reference: float) -> tuple[float, float]:
    """(kernel part, shape part) of the time the expert GEMMs lose against full bandwidth.

    Matching a plain GEMM at the same rows would cut the class to ``achieved / reference`` of
    its time; what is left is lost to the shape itself, which only more rows per expert (or
    wider expert shards) recover. The two parts add up to ``class_ms x (1 - achieved)``, the
    parent's claim.
    """
    kernel = headroom_ms(class_ms, 1.0, achieved, reference)
    return kernel, headroom_ms(class_ms, 1.0, achieved) - kernel


def _kernel_evidence(k) -> list:
    names = (
        "share_of_step", "count_per_step", "grid_ctas", "sm_count", "tokens_per_expert", "achieved_bw_fraction",
        "reference_bw_fraction", "reference_dtype", "backend", "expected_backend", "fallback", "median_us",
        "extra_launches_per_step", "concurrent_streams",
    )
    estimated = set(k.get("estimated_from_bound", ()))
    return [
        ev(f"kernel_classes[{k['kernel_class']}].{n}" + (" (estimated from the bound)" if n in estimated else ""), k[n])
        for n in names
        if n in k
    ]



# The MoE class with the plain-GEMM yardstick at its rows per expert, and the device time it shares.
MOE_AND_REFERENCE = (
    AS.k << KernelClass(kernel_class="moe", share_of_step=MATCH.share, achieved_bw_fraction=MATCH.a, reference_bw_fraction=MATCH.r),
    Budget(device_ms=MATCH.device),
)


def in_step_host_ms(b, host: float, step: float, between: float) -> float:
    """Host time between the ops inside the step: the host part less the wait between steps, less what the
    profiler added (it records every op, so its cost lands in these gaps)."""
    unprofiled = b.get("unprofiled_step_ms")
    inside = max(0.0, host - between)
    return host_without_profiler(inside, step, unprofiled) if unprofiled else inside


def a_few_sms(share: float, ctas: int, sms: int) -> bool:
    """A class large enough to lead that runs on under UNDERFILLED of the SMs."""
    return share >= MIN_SHARE and ctas < UNDERFILLED * sms


def underfilled_attention() -> tuple:
    """Patterns for a decode attention grid on a few SMs whose KV split nobody stated. Binds ``k``, ``share``,
    ``ctas``, ``sms``."""
    return (
        AS.k << KernelClass(kernel_class="attention", share_of_step=MATCH.share, grid_ctas=MATCH.ctas, sm_count=MATCH.sms),
        NOT(KernelClass(kernel_class="attention", split_kv=W())),
        TEST(lambda share, ctas, sms: a_few_sms(share, ctas, sms)),
    )


def fewer_tokens_with_more_streams() -> tuple:
    """Runs where more sequences a step made fewer tokens per second in all, beyond batching's own overheads, with no
    long prompts to explain it (prefill in the decode steps does the same)."""
    return (
        AS.d << RunDiff(setting=P(lambda s: s in BATCH_SETTINGS) & MATCH.setting, figure="output_tokens_per_s",
                        slowdown=MATCH.slowdown, slower=MATCH.slower, faster=MATCH.faster),
        NOT(Metrics(input_tokens=P(lambda n: n >= LONG_PROMPT_TOKENS))),
        TEST(lambda slowdown, slower, faster: slowdown >= FEWER_TOKENS_WITH_MORE_STREAMS and larger(slower, faster)),
    )


def batched_evidence(setting: str, slowdown: float, slower, faster) -> list:
    return [ev("runs.changed", setting), ev("runs.faster", faster), ev("runs.slower", slower), ev("runs.ratio", slowdown)]


class KernelRules(RuleSet):
    @rule(SPECS["compile-off"], *ablation("torch_compile"))
    def compile_off_measured(self, d):
        """The same workload compiled and not: the delta is what the lost fusion costs."""
        return ablation_finding(d)

    @rule(SPECS["compile-off"], Platform(device_api=P(on_cpu) & MATCH.api), *ablation("cuda_graphs"))
    def compile_off_measured_on_cpu(self, api, d):
        """On a CPU there are no CUDA graphs: the engine's eager flag (enforce_eager) turns compilation off,
        so the runs it tells apart are compiled and not."""
        finding = ablation_finding(d, ev("platform.device_api", api))
        finding.detail += " On a CPU the eager flag turns compilation off; there are no CUDA graphs."
        return finding

    @rule(
        SPECS["compile-off"],
        Server(torch_compile=False),
        AS.b << Budget(host_ms=MATCH.host, step_ms=MATCH.step),
        Host(gap_between_steps_ms=MATCH.between),
        NOT(RunDiff(setting="torch_compile")),
        TEST(lambda b, host, step, between: notable(in_step_host_ms(b, host, step, between), step)),
    )
    def compile_off_in_the_step(self, b, host, step, between):
        """Uncompiled, the host time between ops inside the step is each op's Python dispatch, which compiled code
        does not pay; the wait between steps (scheduling) stays. Fusion's savings are not counted, so it is a floor."""
        removable = in_step_host_ms(b, host, step, between)
        unprofiled = b.get("unprofiled_step_ms")
        return Finding(
            evidence=[ev("server.torch_compile", False), ev("budget.host_ms", host, "ms"), ev("host.gap_between_steps_ms", between, "ms"),
                      ev("budget.step_ms", step, "ms"), *([ev("budget.unprofiled_step_ms", unprofiled, "ms")] if unprofiled else [])],
            removable_ms=removable,
            step_ms=min(step, unprofiled) if unprofiled else step,
            detail=f"{removable:.3g} ms of host time sits between the ops inside the step (dispatch), besides {between:.3g} ms between "
            "steps; compiled, the ops run as generated code without it (fusion's own savings come on top).",
        )

    @rule(SPECS["compile-off"], Server(torch_compile=False), NOT(RunDiff(setting="torch_compile")))
    def compile_off_by_flag(self):
        return Finding(evidence=[ev("server.torch_compile", False)], detail="The same workload compiled would bound it.")

    @rule(SPECS["slow-kernel-path"], *ablation("kernel_backend"))
    def kernel_backend_measured(self, d):
        """Keyed by the slower backend's name; a kernel library switched off or on (a flag) by which way it was."""
        slower = d["slower"]
        key = "library-off" if switched_on(d["faster"], slower) else "library-on" if switched_on(slower, d["faster"]) else slower
        return ablation_finding(d, key=key)

    @rule(SPECS["slow-kernel-path"], *ablation("quantization"), TEST(lambda d: beyond_its_bytes(d) and not heavier_format_past_the_sweep(d)))
    def quantized_path_measured(self, d):
        """Another weight format at the same workload is slower than its extra bytes can make it: its kernels, not
        its bytes, set the step. (fp16 a sixth slower than int4 is its four times the bytes, read faster.) Not where
        the heavier format's token runs past any device's sweep and the lighter one's does not: its weights left the
        device (cpu-offload)."""
        return ablation_finding(d, key=d["slower"])

    @rule(SPECS["moe-untuned-config"], *ablation("moe_config"))
    def moe_config_measured(self, d):
        """The same MoE work with and without a tuned config for this GPU: the default tiles are the delta."""
        return ablation_finding(d)

    @rule(SPECS["slow-kernel-path"], *ablation("kv_cache_dtype"))
    def kv_format_measured(self, d):
        """A KV cache stored in fewer bits reads fewer bytes, yet the step grew: attention's kernels for that format
        (dequantising it, a generic or host-side path) cost more than the bytes it saves."""
        return ablation_finding(d, key=d["slower"])

    @rule(
        SPECS["small-expert-kernels"],
        AS.k << KernelClass(kernel_class="moe", share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda k, share: share >= MIN_SHARE and small_expert_work(k)),
    )
    def small_expert_kernels(self, k, share, device):
        return Finding(
            evidence=_kernel_evidence(k) + [ev("budget.device_ms", device, "ms")],
            removable_ms=headroom_ms(device, share, k.get("achieved_bw_fraction")),
        )

    @rule(
        SPECS["small-expert-kernels"],
        AS.k << KernelClass(kernel_class="moe"),
        NOT(Budget(device_ms=W())),
        NOT(Reference(step_ms=W())),
        TEST(lambda k: small_expert_work(k) and (k.get("share_of_step", 0.0) >= MIN_SHARE or class_time_ms(k, None) is not None)),
    )
    def small_expert_kernels_without_a_step(self, k):
        """The expert GEMMs' shape and the bandwidth they reached are measured, but no step time is: where the kernel
        summary gives their launches and one launch's median time, those are the class's time, and what full bandwidth
        would leave of it is the gain; where it gives only their share, the cause is named and its size waits for the
        step's time."""
        class_ms = class_time_ms(k, None)
        if class_ms is None:
            return Finding(evidence=_kernel_evidence(k), grade=Grade.indicated, missing=["metrics.tpot_ms"],
                           detail=f"The expert GEMMs take {k['share_of_step']:.0%} of the step; a step time sizes them.")
        return Finding(evidence=_kernel_evidence(k), removable_ms=headroom_ms(class_ms, 1.0, k.get("achieved_bw_fraction")),
                       detail=f"The expert GEMMs take {class_ms:.4g} ms a step ({k['count_per_step']:g} launches of "
                       f"{k['median_us']:.4g} us).")

    @rule(
        SPECS["small-expert-kernels"],
        Layout(routed_experts=True, batch=W()),
        Bound(source="compute_bound", rows_per_touched_expert=MATCH.rows, floor_ms=MATCH.floor, observed_step_ms=MATCH.observed),
        NOT(KernelClass(kernel_class="moe")),
        NOT(Budget()),
        NOT(Expectation(kind=P(lambda kind: kind in SAME_SETUP_EARLIER))),
        TEST(lambda rows, floor, observed: rows < SMALL_ROWS_PER_EXPERT and observed >= FAR_FROM_FLOOR * floor),
    )
    def small_expert_shape_untraced(self, rows, floor, observed):
        """No trace, but the pinned batch leaves each touched expert a few rows: its GEMMs are matrix-vector products
        that launch few CTAs and stream weights below the bandwidth the floor assumes, and the step is well above that
        floor. Possible: the MoE kernels' share of a trace, or their achieved bandwidth, decides it. Only on the floor
        recomputed from the pinned model, at a batch the case states: a quoted byte count may leave bytes out, and the
        calculator's default batch of one is no evidence of the rows. Not when the expected figure is the same setup on
        an earlier build or earlier in the run: the same rows per expert reached it there, so the shape is not what
        the two differ in."""
        return Finding(
            evidence=[ev("bound.rows_per_touched_expert", rows), ev("bound.floor_ms", floor, "ms"),
                      ev("bound.observed_step_ms", observed, "ms")],
            grade=Grade.possible,
            missing=["kernel_classes[moe]"],
            detail=f"{rows:.3g} rows per touched expert at the pinned batch; the step is {observed / floor:.3g}x its floor.",
        )

    @rule(SPECS["expert-kernel-below-reference"], *MOE_AND_REFERENCE, TEST(lambda a, r: a * BELOW_REFERENCE < r))
    def expert_kernel_below_reference(self, k, share, a, r, device):
        kernel, _ = split_expert_loss(device * share, a, r)
        detail = f"With {k['tokens_per_expert']:.3g} rows per expert a plain GEMM reaches {r:.0%} of peak bandwidth, the served kernel {a:.0%}."
        return Finding(evidence=_kernel_evidence(k), removable_ms=kernel, detail=detail)

    @rule(SPECS["expert-shape-limited"], *MOE_AND_REFERENCE, TEST(lambda r: r < LOW_BW_FRACTION))
    def expert_shape_limited(self, k, share, a, r, device):
        _, shape = split_expert_loss(device * share, a, r)
        detail = f"With {k['tokens_per_expert']:.3g} rows per expert a plain GEMM reaches only {r:.0%} of peak bandwidth."
        return Finding(evidence=_kernel_evidence(k), removable_ms=shape, detail=detail)

    @rule(
        SPECS["moe-untuned-config"],
        AS.k << KernelClass(kernel_class="moe", tuned_config=False, share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda share: share >= MIN_SHARE),
    )
    def moe_untuned_config(self, k, share, device):
        """With a GEMM sweep, tuning is bounded by matching the plain GEMM at the same rows, not
        by full bandwidth: the rest of the loss belongs to the shape."""
        removable = headroom_ms(device, share, k.get("achieved_bw_fraction"), k.get("reference_bw_fraction", 1.0))
        return Finding(evidence=_kernel_evidence(k) + [ev("kernel_classes[moe].tuned_config", False)], removable_ms=removable)

    @rule(
        SPECS["slow-kernel-path"],
        AS.k << KernelClass(backend=MATCH.backend, share_of_step=MATCH.share, achieved_bw_fraction=MATCH.frac),
        Budget(device_ms=MATCH.device),
        TEST(lambda share, frac: share >= MIN_SHARE and frac < LOW_BW_FRACTION / SLOW_PATH_MARGIN),
    )
    def slow_kernel_path(self, k, backend, share, frac, device):
        return _slow_backend_finding(k, backend, frac, headroom_ms(device, share, frac))

    @rule(
        SPECS["slow-kernel-path"],
        AS.k << KernelClass(backend=MATCH.backend, share_of_step=MATCH.share, achieved_bw_fraction=MATCH.frac),
        Reference(step_ms=MATCH.step),
        NOT(Budget()),
        TEST(lambda share, frac: share >= MIN_SHARE and frac < LOW_BW_FRACTION / SLOW_PATH_MARGIN),
    )
    def slow_kernel_path_of_step(self, k, backend, share, frac, step):
        """No budget: the class's share of the measured step, at the bandwidth it reached, is what full bandwidth saves."""
        return _slow_backend_finding(k, backend, frac, headroom_ms(step, share, frac))

    @rule(
        SPECS["slow-kernel-path"],
        AS.k << KernelClass(backend=MATCH.backend, share_of_step=MATCH.share),
        Bound(floor_ms=MATCH.floor, observed_step_ms=MATCH.step),
        TEST(lambda k, share, floor, step: k.get("achieved_bw_fraction") is None and share >= MIN_SHARE
             and floor / (share * step) < LOW_BW_FRACTION / SLOW_PATH_MARGIN),
    )
    def slow_kernel_path_within_the_floor(self, k, backend, share, floor, step):
        """The class's bandwidth is not measured, but it cannot move more than the whole step's bytes: the floor over the
        class's time is the most it can have reached. A large class whose best case is under the slow-path line spends
        its time on something other than the bytes. Its own bytes are not known, so all of its time bounds the gain."""
        most = floor / (share * step)
        finding = _slow_backend_finding(k, backend, most, headroom_ms(step, share, None), at_most=True)
        finding.evidence += [ev("bound.floor_ms", floor, "ms"), ev("bound.observed_step_ms", step, "ms")]
        return finding

    @rule(
        SPECS["sort-sampling"],
        AS.s << Server(),
        AS.k << KernelClass(kernel_class="sampling", share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda s, share: share >= SAMPLING_SHARE and whole_vocabulary_sort(s)),
    )
    def sort_sampling(self, s, k, share, device):
        """A sorting configuration, and the sampling kernels' measured share of the device time bounds it."""
        evidence = [ev(f"server.{n}", s[n]) for n in ("sampling", "top_k", "vocab_size") if n in s]
        return Finding(evidence=_kernel_evidence(k) + evidence, removable_ms=device * share)

    @rule(
        SPECS["sort-sampling"],
        AS.s << Server(),
        AS.c << HostCostFact(name="sampling"),
        Reference(step_ms=MATCH.step),
        NOT(KernelClass(kernel_class="sampling", share_of_step=W())),
        TEST(lambda s, c, step: whole_vocabulary_sort(s) and timed_ms(c, step) is not None),
    )
    def sort_sampling_on_the_host(self, s, c, step):
        """A sampler on the host that sorts the whole vocabulary, and its time per step measured: the sort
        (V log V over the vocabulary) is most of what sampling does, so that time bounds it."""
        ms = timed_ms(c, step)
        evidence = [ev(f"server.{n}", s[n]) for n in ("sampling", "top_k", "vocab_size") if n in s]
        return Finding(evidence=[ev("host_costs[sampling].ms_per_step", ms, "ms"), *evidence], removable_ms=ms)

    @rule(
        SPECS["sort-sampling"],
        AS.s << Server(),
        NOT(KernelClass(kernel_class="sampling", share_of_step=W())),
        TEST(lambda s: whole_vocabulary_sort(s)),
    )
    def sort_sampling_by_config(self, s):
        """No sampling kernel share to bound it: the configuration names the sort, nothing more."""
        evidence = [ev(f"server.{n}", s[n]) for n in ("sampling", "top_k", "vocab_size") if n in s]
        return Finding(evidence=evidence, detail="Named by the configuration; a sampling kernel share would bound it.")

    @rule(SPECS["slow-kernel-path"], AS.k << KernelClass(kernel_class=P(lambda c: c != "moe") & MATCH.cls, tuned_config=False))
    def untuned_launch_config(self, k, cls):
        """A kernel launched with block sizes or tiles nobody tuned for this device and shape (a default, a table
        missing its entry) leaves bandwidth unused at every call: the fused-MoE case has its own rule, the same holds
        for attention, GEMMs and the rest. Indicated: the class's share and achieved bandwidth would bound it."""
        return Finding(evidence=_kernel_evidence(k) + [ev(f"kernel_classes[{cls}].tuned_config", False)], key=cls,
                       detail=f"The {cls} kernels ran without a configuration tuned for this device and shape.")

    @rule(
        SPECS["moe-untuned-config"],
        AS.k << KernelClass(kernel_class="moe", tuned_config=False),
        NOT(Budget()),
    )
    def moe_untuned_config_indicated(self, k):
        return Finding(evidence=_kernel_evidence(k) + [ev("kernel_classes[moe].tuned_config", False)])

    @rule(
        SPECS["moe-untuned-config"],
        AS.k << KernelClass(kernel_class="moe", tuned_config=False),
        Budget(),
        TEST(lambda k: "share_of_step" not in k),
    )
    def moe_untuned_config_without_share(self, k):
        """A budget, but no share of it for the MoE class: named, not bounded."""
        return Finding(evidence=_kernel_evidence(k) + [ev("kernel_classes[moe].tuned_config", False)])

    @rule(
        SPECS["slow-kernel-path"],
        AS.k << KernelClass(share_of_step=MATCH.share),
        Budget(device_ms=MATCH.device),
        TEST(lambda k, share: off_expected_path(k) and share >= FALLBACK_MIN_SHARE),
    )
    def fallback_kernel_path(self, k, share, device):
        """The class's device time bounds it, or its headroom to full bandwidth when that was measured."""
        return _fallback_finding(k, headroom_ms(device, share, k.get("achieved_bw_fraction")))

    @rule(
        SPECS["slow-kernel-path"],
        AS.k << KernelClass(share_of_step=MATCH.share),
        Reference(step_ms=MATCH.step),
        NOT(Budget()),
        TEST(lambda k, share: off_expected_path(k) and share >= FALLBACK_MIN_SHARE),
    )
    def fallback_kernel_path_of_step(self, k, share, step):
        """No budget: the class's share of the measured step is the most the fallback can cost."""
        return _fallback_finding(k, headroom_ms(step, share, k.get("achieved_bw_fraction")))

    @rule(
        SPECS["slow-kernel-path"],
        Server(quantization=MATCH.scheme),
        Expectation(kind=MATCH.kind),
        TEST(lambda kind: kind not in SAME_SETUP_EARLIER),
        NOT(KernelClass(share_of_step=W())),
        NOT(RunDiff(setting="quantization")),
        NOT(device_read_idle()),
    )
    def quantized_path_possible(self, scheme, kind):
        """Quantized weights move fewer bytes only if their kernels keep up; a run short of what was
        expected with nothing measured yet makes the quantized GEMMs a candidate, not a finding. Not
        when the expected figure is the same setup's on an earlier build or earlier in the run: the same
        weights in the same format reached it on the same machine, so the format has a kernel that keeps up
        there, and the shortfall is what changed between the two, not the format. Nor on a device
        read idle while decoding: a slow GEMM keeps its device busy, and one that ran no kernels ran its
        GEMMs elsewhere."""
        return Finding(
            evidence=[ev("server.quantization", scheme), ev("expected.kind", kind)],
            key="quantized",
            grade=Grade.possible,
            detail=QUANTIZED_CHECK,
        )

    @rule(
        SPECS["slow-kernel-path"],
        AS.d << RunDiff(setting="quantization", slower=MATCH.wide, faster=MATCH.narrow, slowdown=MATCH.speedup),
        OR(Metrics(concurrency=1), Layout(batch=1)),
        TEST(lambda d, wide, narrow, speedup: observed_on_the_faster_side(d) and short_of_its_bytes(wide, narrow, speedup)),
    )
    def narrower_format_short_of_its_bytes(self, d, wide, narrow, speedup):
        """One stream's step is the weights' read, so a format storing a fraction of the bits should take about that
        fraction of the step. The observed narrower format is faster, but by under half what its bytes allow: its
        kernels do not stream the fewer bytes at the wider format's pace (dequantising, an unoptimised matrix-vector
        path), or a fixed cost outside the weights holds the step. Possible: the GEMM class's share of a trace tells
        which."""
        ratio = format_bits(wide) / format_bits(narrow)
        return Finding(
            evidence=[ev("runs.changed", "quantization"), ev("runs.wider", wide), ev("runs.narrower", narrow),
                      ev("runs.speedup", speedup), ev("runs.bits_ratio", ratio)],
            key="quantized",
            grade=Grade.possible,
            detail=f"{narrow} is {speedup:.2f}x as fast as {wide}, whose elements are {ratio:g}x as wide.",
        )

    @rule(
        SPECS["slow-kernel-path"],
        Server(quantization=MATCH.scheme),
        Bound(floor_ms=MATCH.floor, observed_step_ms=MATCH.observed),
        NOT(Expectation()),
        NOT(KernelClass(share_of_step=W())),
        NOT(RunDiff(setting="quantization")),
        NOT(device_read_idle()),
        TEST(lambda floor, observed: observed >= FAR_FROM_FLOOR * floor),
    )
    def quantized_path_below_its_floor(self, scheme, floor, observed):
        """No expected figure, but the bound is one: quantized weights, and a step at least twice the floor that reads
        their bytes at full bandwidth. The format saves bytes only where its kernels stream them near that bandwidth,
        so, nothing measured yet, its GEMMs are a candidate for the gap, as they are against a figure short of what was
        expected (not on a device read idle, as above)."""
        return Finding(
            evidence=[ev("server.quantization", scheme), ev("bound.floor_ms", floor, "ms"), ev("bound.observed_step_ms", observed, "ms")],
            key="quantized",
            grade=Grade.possible,
            detail=QUANTIZED_CHECK,
        )

    @rule(
        SPECS["slow-kernel-path"],
        AS.s << Speculation(verify_ms=MATCH.verify, ordinary_step_ms=MATCH.ordinary),
        OR(Metrics(concurrency=1), Layout(batch=1)),
        TEST(lambda s, verify, ordinary: verify >= VERIFY_DEARER * ordinary and few_verify_rows(s)),
    )
    def verify_step_dearer_than_its_rows(self, s, verify, ordinary):
        """One stream's verify of its k drafts and its own token runs k+1 rows through a step that still reads every
        weight once, as the ordinary step does; at a few rows the extra arithmetic and KV reads are small, so a verify
        twice the ordinary step (VERIFY_DEARER) is its kernels' path for several rows: a quantized GEMM with no fast
        multi-row kernel, attention dispatched to a prefill kernel. The measured cycle says what it costs a token: the
        verify's excess over an ordinary step, over the tokens a cycle emits."""
        rows, emitted = drafts_per_cycle(s) + 1, yield_per_cycle(s)
        evidence = [ev("speculation.verify_ms", verify, "ms"), ev("speculation.ordinary_step_ms", ordinary, "ms"),
                    ev("verified_tokens_per_cycle", rows)]
        detail = f"A verify of {rows:g} tokens takes {verify / ordinary:.3g} ordinary steps ({verify:.4g} against {ordinary:.4g} ms)."
        if not emitted:
            return Finding(evidence=evidence, key="verify", grade=Grade.indicated, detail=detail)
        return Finding(evidence=[*evidence, ev("emitted_tokens_per_cycle", emitted)], key="verify",
                       removable_ms=(verify - ordinary) / emitted,
                       detail=f"{detail} At the {emitted:.3g} tokens a cycle emits that is {(verify - ordinary) / emitted:.3g} ms a token.")

    @rule(
        SPECS["slow-kernel-path"],
        AS.s << Speculation(per_draft_ms=W()),
        OR(Metrics(concurrency=1), Layout(batch=1)),
        NOT(Metrics(concurrency=P(lambda c: c > 1))),
        NOT(Speculation(verify_ms=W())),
        TEST(lambda s: drafts_dearer_than(s, ROW_DEARER)),
    )
    def verify_rows_dearer_than_a_step(self, s):
        """The same path, read from runs at two draft lengths instead of a timed verify: each further draft adds its
        drafting (at most DRAFT_STEP_SHARE of an ordinary token) and one verify row, a few per cent of a step where the
        weights are read once for all rows; a cycle that grows by ROW_DEARER of a step or more per draft reads the
        weights again for each row. The gain is the growth beyond the drafting allowance, per token at the longest
        draft: at least, as the drafting is usually far cheaper."""
        ordinary, excess, k, emitted = ordinary_token_ms(s), row_excess_ms(s), s["draft_sweep_hi"], s["draft_sweep_emitted"]
        removable = k * (excess - DRAFT_STEP_SHARE * ordinary) / emitted
        return Finding(
            evidence=[ev("speculation.draft_sweep_lo", s["draft_sweep_lo"]), ev("speculation.draft_sweep_hi", k),
                      ev("speculation.per_draft_ms", s["per_draft_ms"], "ms"), ev("ordinary_token_ms", ordinary, "ms"),
                      ev("speculation.acceptance_rate", s["acceptance_rate"])],
            key="verify",
            removable_ms=removable,
            step_ms=s["draft_sweep_token_ms"],
            at_least=True,
            detail=f"From {s['draft_sweep_lo']:g} to {k:g} drafts a cycle grows {s['per_draft_ms']:.3g} ms a draft, "
            f"{excess / ordinary:.2f} of a {ordinary:.3g} ms ordinary token: each row pays a weight read of its own.",
        )

    @rule(SPECS["slow-kernel-path"], *fewer_tokens_with_more_streams())
    def batched_step_slower_than_serial(self, d, setting, slowdown, slower, faster):
        """More sequences in a step made fewer tokens per second in all: the batched step took longer than running its
        sequences one after another, each re-reading every weight. A step at several rows reads the weights once, so
        only its kernels can make it dearer than that: the engine's path for more than one row (a dequantise-then-dense
        GEMM, a generic fallback, a kernel tuned for one row or for prefill) is slower than its single-row one. Not with
        long prompts, whose prefill in the decode steps does the same (prefill-stalls). Indicated where the runs vary the
        batch itself or the prompts are stated short; possible where they vary the requests in flight and the prompts
        are not stated."""
        return Finding(
            evidence=batched_evidence(setting, slowdown, slower, faster),
            key="batched",
            grade=self.batched_grade(setting),
            detail=f"{slower} sequences a step made {slowdown:.3g}x fewer tokens per second in all than {faster}: the "
            "batched step cost more than its sequences one by one. The kernels' names and times at both batches in a trace "
            "show which path the larger batch takes.",
        )

    @rule(
        SPECULATION_SPECS["speculation-slowdown"],
        *fewer_tokens_with_more_streams(),
        Server(speculative=P(lambda m: bool(m)) & MATCH.method),
        NOT(Server(speculative_active=False)),
    )
    def speculation_batched_slower_than_serial(self, d, setting, slowdown, slower, faster, method):
        """The same fall with speculation on: where the single stream drafted, its steps already verified k+1 rows each
        on the engine's multi-row path, and what more streams add is speculation's handling of several sequences (a
        draft pass per sequence, verifies of unequal accepted lengths, drafting switched off past a batch while its
        pipeline runs): the cycle at that load emits fewer tokens than it costs. Possible: how often the single stream
        drafted is not known, and the same runs with speculation off tell it from the kernels."""
        return Finding(
            evidence=[ev("server.speculative", method), *batched_evidence(setting, slowdown, slower, faster)],
            grade=Grade.possible,
            detail=f"With speculation on, {slower} sequences made {slowdown:.3g}x fewer tokens per second in all than {faster}, "
            "whose steps already verified several rows each.",
        )

    def batched_grade(self, setting: str) -> Grade:
        stated = any(isinstance(f, Metrics) and "input_tokens" in f for f in self.facts.values())
        return Grade.indicated if setting == "batch" or stated else Grade.possible

    @rule(
        SPECS["slow-kernel-path"],
        AS.k << KernelClass(share_of_step=MATCH.share, grid_ctas=MATCH.ctas, sm_count=MATCH.sms),
        Budget(device_ms=MATCH.device),
        TEST(lambda k, share, ctas, sms: underfilled(k, share, ctas, sms)),
    )
    def underfilled_grid(self, k, share, ctas, sms, device):
        """A large kernel class on a grid of a few SMs: its time, less what it would take over every SM, is the bound."""
        return _underfilled_finding(k, class_time_ms(k, device))

    @rule(
        SPECS["slow-kernel-path"],
        AS.k << KernelClass(share_of_step=MATCH.share, grid_ctas=MATCH.ctas, sm_count=MATCH.sms),
        NOT(Budget(device_ms=W())),
        TEST(lambda k, share, ctas, sms: underfilled(k, share, ctas, sms)),
    )
    def underfilled_grid_untimed(self, k, share, ctas, sms):
        """No device time to take the share of: the class's launches and their median duration time it, and with no
        measured step its share says what device time that is."""
        return self.untimed_underfilled_finding(k, share)

    def untimed_underfilled_finding(self, k, share: float) -> Finding:
        class_ms = class_time_ms(k, None)
        implied = class_ms / share if class_ms is not None and self.reference_step_ms is None else None
        return _underfilled_finding(k, class_ms, implied)

    @rule(CONTEXT_SPECS["attention-split-kv-off"], *underfilled_attention(), Budget(device_ms=MATCH.device))
    def attention_grid_underfilled(self, k, share, ctas, sms, device, parent_cap_ms):
        """The split unstated, but the decode attention kernel's grid covers under a quarter of the SMs at a large share
        of the step: its CTAs are sequences x KV heads, each walking its whole KV, which is what a kernel without the
        split launches at a small batch. Its time, less what it would take over every SM, is the most a split saves."""
        return _underfilled_finding(k, class_time_ms(k, device))

    @rule(CONTEXT_SPECS["attention-split-kv-off"], *underfilled_attention(), NOT(Budget(device_ms=W())))
    def attention_grid_underfilled_untimed(self, k, share, ctas, sms, parent_cap_ms):
        return self.untimed_underfilled_finding(k, share)

    @rule(
        SPECS["slow-kernel-path"],
        Server(quantization=MATCH.scheme),
        Platform(fallback_logged=MATCH.line),
        NOT(Platform(fallback_read_as=P(lambda read_as: bool(read_as)))),
        NOT(Memory(layers_on_device=W())),
        NOT(Memory(weights_on_host_fraction=P(lambda share: share > 0))),
        NOT(KernelClass(share_of_step=W())),
        TEST(lambda line: OTHER_PART.search(line) is None),
    )
    def quantized_fallback_logged(self, scheme, line):
        """The engine logged a slower path while serving quantized weights, and the line is not the layers it
        placed (nor beside a share of the model stated to be in host memory, which is what such a line reports), nor
        another fact the canonical step read from it (a graph mode, a default MoE config), nor does it name another
        part of the step (OTHER_PART: the KV cache, attention, sampling, communication, pipeline stages): the
        quantized GEMMs (their kernel, or the dtype they compute in) are what a weight format changes on the decode
        path, so the logged fallback is theirs before it is the build's."""
        return Finding(
            evidence=[ev("server.quantization", scheme), ev("platform.fallback_logged", line)],
            key="quantized",
            grade=Grade.indicated,
            detail="The GEMM class's share of a trace, or an A/B with the format's fast kernel (or another format), bounds it.",
        )

    @rule(SPECS["slow-kernel-path"], AS.k << KernelClass(), TEST(lambda k: off_expected_path(k) and "share_of_step" not in k))
    def fallback_kernel_path_unbounded(self, k):
        """No share of the step for the class: the path is named, its time is not."""
        return _fallback_finding(k, None)

    @rule(
        SPECS["slow-kernel-path"],
        AS.k << KernelClass(share_of_step=MATCH.share),
        NOT(Reference()),
        TEST(lambda k, share: off_expected_path(k) and share >= FALLBACK_MIN_SHARE),
    )
    def fallback_kernel_path_without_step(self, k, share):
        return _fallback_finding(k, None)

    @rule(
        SPECS["extra-kernels-per-step"],
        AS.k << KernelClass(extra_launches_per_step=MATCH.extra),
        NOT(Graph(launch_cost_us=W())),
        TEST(lambda extra: extra >= EXTRA_LAUNCHES),
    )
    def extra_kernels_per_step(self, k, extra):
        return _extra_launch_finding(k, extra, k.get("median_us"), f"kernel_classes[{k['kernel_class']}].median_us")

    @rule(
        SPECS["extra-kernels-per-step"],
        AS.k << KernelClass(extra_launches_per_step=MATCH.extra),
        AS.g << Graph(launch_cost_us=MATCH.launch_us),
        TEST(lambda extra: extra >= EXTRA_LAUNCHES),
    )
    def extra_kernels_with_launch_cost(self, k, extra, g, launch_us):
        """The kernel's own time if measured, else the host launch cost, which a fully replayed graph does not pay."""
        if "median_us" in k:
            return _extra_launch_finding(k, extra, k["median_us"], f"kernel_classes[{k['kernel_class']}].median_us")
        if g.get("status") == "full":
            return _extra_launch_finding(k, extra, None, "")
        return _extra_launch_finding(k, extra, launch_us, "graph.launch_cost_us")

    @rule(
        SPECS["expert-tile-padding"],
        Routing(tokens_per_expert=MATCH.rows, kernel_tile_rows=MATCH.tile),
        TEST(lambda rows, tile: rows > 0 and tile >= TILE_PADDING * rows),
    )
    def expert_tile_padding(self, rows, tile):
        return padding_finding(rows, tile, "routing.tokens_per_expert", "")

    @rule(
        SPECS["expert-tile-padding"],
        Routing(kernel_tile_rows=MATCH.tile),
        NOT(Routing(tokens_per_expert=W())),
        AS.m << Metrics(),
        NOT(Server(speculative=W())),
        TEST(lambda m, tile: (rows := decode_tokens_at_most(m)) is not None and tile >= TILE_PADDING * rows),
    )
    def expert_tile_padding_at_most(self, m, tile):
        """Unmeasured rows per expert are still bounded: a token routes to distinct experts, so no expert
        gets more rows than the step has tokens, which one-token decode caps at the sequences running."""
        return padding_finding(decode_tokens_at_most(m), tile, "rows_per_expert_at_most", "_at_least")

    @rule(SPECS["extra-kernels-per-step"], *ablation("lora"))
    def lora_enabled_slower(self, d):
        """The same load with LoRA enabled is slower: every layer's projections gain the adapters' shrink and expand
        kernels (and their batch bookkeeping) whether or not a request uses an adapter; the delta is their cost."""
        return ablation_finding(d)

    @rule(SPECS["extra-kernels-per-step"], AS.k << KernelClass(per_expert_launches=True))
    def per_expert_launches(self, k):
        """A loop over experts launches a GEMM and its gathers per expert: many small kernels per layer."""
        return Finding(
            evidence=[ev(f"kernel_classes[{k['kernel_class']}].per_expert_launches", True)],
            key=k["kernel_class"],
            detail="The MoE layer loops over experts instead of running one grouped kernel.",
        )

    @rule(SPECS["lost-stream-overlap"], AS.k << KernelClass(concurrent_streams=False))
    def lost_stream_overlap(self, k):
        return Finding(
            evidence=_kernel_evidence(k),
            key=k["kernel_class"],
            detail=f"Independent {k['kernel_class']} kernels run back to back on one stream.",
        )


def padding_finding(rows: float, tile: int, rows_name: str, bound: str) -> Finding:
    """Rows per expert against the tile they are padded to; ``bound`` marks figures that are limits."""
    wasted = 1 - rows / tile
    return Finding(
        evidence=[ev(rows_name, rows), ev("routing.kernel_tile_rows", tile), ev(f"padded_fraction{bound}", wasted)],
        detail=f"{'At most ' if bound else ''}{rows:.3g} rows per expert are padded to a {tile}-row tile: "
        f"{'at least ' if bound else ''}{wasted:.0%} of each tile is padding.",
    )


def decode_tokens_at_most(m) -> float | None:
    """Tokens in one decode step at most: the sequences running, else the requests in flight."""
    return m.get("running_sequences", m.get("concurrency"))


def class_time_ms(k, device_ms: float | None) -> float | None:
    """A kernel class's time per step: its share of the device time, else its launches per step times one launch's
    median duration (a kernel summary states either; both are the same time)."""
    if device_ms is not None:
        return device_ms * k["share_of_step"]
    if "count_per_step" in k and "median_us" in k:
        return k["count_per_step"] * k["median_us"] / 1e3
    return None


def underfilled(k, share: float, ctas: int, sms: int) -> bool:
    return k["kernel_class"] not in OWN_GRID_RULES and a_few_sms(share, ctas, sms)


def _underfilled_finding(k, class_ms: float | None, step_ms: float | None = None) -> Finding:
    """Spread over every SM the class's work would take ctas/sms of its time: the rest is the most a wider grid saves
    (of ``step_ms`` when the step it is held against is not the reference step)."""
    cls, ctas, sms = k["kernel_class"], k["grid_ctas"], k["sm_count"]
    removable = None if class_ms is None else class_ms * (1 - ctas / sms)
    return Finding(
        evidence=_kernel_evidence(k),
        removable_ms=removable,
        step_ms=step_ms,
        key=cls,
        grade=None if removable is not None else Grade.indicated,
        detail=f"{cls} takes {k['share_of_step']:.0%} of the step on {ctas:g} CTAs of {sms} SMs"
        + ("; a step time would bound what a grid over every SM saves." if removable is None else "."),
    )


def _fallback_finding(k, removable: float | None) -> Finding:
    cls = k["kernel_class"]
    if k.get("fallback") is True:
        why = f"{cls} ran a fallback path" + (f" ({k['backend']})" if "backend" in k else "")
    else:
        why = f"{cls} ran {k['backend']} where {k['expected_backend']} is expected"
    bound = "" if removable is not None else "; its time is not measured yet"
    return Finding(evidence=_kernel_evidence(k), removable_ms=removable, key=cls, detail=f"{why}{bound}.")


def _extra_launch_finding(k, extra: float, cost_us: float | None, cost_name: str) -> Finding:
    cls = k["kernel_class"]
    evidence = _kernel_evidence(k)
    if cost_us is None:
        return Finding(evidence=evidence, key=cls, detail=f"{extra:.0f} launches per step beyond the model's own; their cost is not measured yet.")
    if cost_name == "graph.launch_cost_us":
        evidence.append(ev(cost_name, cost_us, "us"))
    removable = extra * cost_us / 1e3
    return Finding(
        evidence=evidence,
        removable_ms=removable,
        key=cls,
        detail=f"{extra:.0f} extra launches x {cost_us:.3g} us ({cost_name}) = {removable:.3g} ms per step.",
    )
