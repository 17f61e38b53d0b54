"""The machine under the bound: clocks, throttling, and bytes that travel over PCIe.

The bound assumes full clocks and that every byte comes from HBM. A throttled GPU or
weights offloaded to host memory break those assumptions without any kernel being wrong.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    NOT,
    OR,
    P,
    TEST,
    W,
    Bound,
    Budget,
    Device,
    Expectation,
    Finding,
    Grade,
    Layout,
    Memory,
    Metrics,
    Platform,
    Probe,
    RepeatDecline,
    RuleSet,
    RunDiff,
    Server,
    ev,
    load_specs,
    rule,
)

from diagnoser.engine.facts import PER_TOKEN_FIGURES
from diagnoser.models.serving import WHOLESALE_SETTINGS, WORKLOAD_SETTINGS
from diagnoser.rules.comparison import SPECS as COMPARISON_SPECS
from diagnoser.rules.comparison import (
    CLOCK_SETTINGS, FAST_PATH_GAP, SIZED, SPREAD_SETTINGS, UNITS, ablation, ablation_finding, beyond_the_size, heavier_format,
    SLOWER, idle_through_the_delta, larger,
)
from diagnoser.rules.capacity import USABLE_SHARE
from diagnoser.rules.launch import DEVICE_STEP_CEILING_MS, SWEEP_MARGIN, idle_utilization, names_off_device_work, on_cpu
from diagnoser.rules.rates import ENGINE_GAP, engine_gap, expected_rate, gap_evidence, per_stream_rate, read_apart, stream_rates

SPECS = load_specs(__file__)

# Clocks under 90 % of their maximum during a run are throttled, not boosting normally.
CLOCK_RATIO = 0.9
# The changes of software alone on one machine: a release, an engine, a build.
SOFTWARE_CHANGES = frozenset(WHOLESALE_SETTINGS) - {"hardware", "os", "several"}
# Practical host-to-device rate of a PCIe gen4 x16 link (GB/s); the rule states it as an assumption.
PCIE_GBS = 25.0
# Exposed host-to-device time worth a hypothesis: 5 % of the step and 0.1 ms. Lower than the
# share asked of launch gaps, because a resident decode loop needs no per-step PCIe traffic.
MIN_H2D_SHARE = 0.05
MIN_H2D_MS = 0.1
# Hot enough that boost logic trades clocks for temperature: NVIDIA boards begin stepping clocks down
# in the 80s °C, well before their slowdown threshold (about 90 °C); laptops' SoCs throttle near it too.
HOT_C = 85.0
# Drawing 95 % of the enforced power limit during the run: the power governor, not the load, sets the clocks.
POWER_CAP_SHARE = 0.95
# Back-to-back repeats of the same work agree within a few per cent; every later one a quarter slower than the first
# is a state that built up under the load.
SUSTAINED_DECLINE = 1.25
# Two readings are one first and one later, faster or slower by chance alike; from three on, a first that beats every
# later one is a trend.
TREND_REPEATS = 3
# A power limit set a tenth or more below the board's default caps the clocks whenever the load would draw more:
# boards ship their default as the limit they sustain rated boost under.
CAPPED_BELOW_DEFAULT = 0.9
# CFS throttling in more than 1 of 20 periods: the engine loop regularly stalls for the rest of a
# (typically 100 ms) quota period, many decode steps long; below that, occasional bursts.
CPU_THROTTLED = 0.05
# Nine tenths of the cores the process may use, measured busy while decoding: top and a cgroup's usage are averages
# over a second or more, so a loop that waits for a core now and then reads a little under its whole allocation.
CORES_SATURATED = 0.9
# Twenty times slower than the same device's own figure for the same work: one engine's settings move a stream's rate
# by tens of per cent, graph capture, a kernel family or a weight format by a few times; twenty is another processor
# doing the work (a CPU path, a runtime the driver cannot run), not a slower path on this one.
OFF_DEVICE_GAP = 20.0
# A device running kernels nine tenths of the time one stream decodes is where the work ran: weights or math placed
# elsewhere leave it waiting for them (an idle device reads 0-2 %, a few offloaded layers leave it visibly short).
DEVICE_BUSY = 0.9
# References taken on this device: another release, setting or engine, or a published row for it.
SAME_DEVICE_KINDS = frozenset({"older_version", "earlier_in_run", "other_config", "other_engine", "vendor_claim"})
# References that are this very engine on this device: an earlier version, or another configuration of it.
SAME_SETUP_KINDS = frozenset({"older_version", "earlier_in_run", "other_config"})
# Several times slower than the same setup on the same device: more than one setting of a working device path costs.
HOST_READ_GAP = 5.0
# The two readings of a token past the device's sweep, as (grade, the fact that settles it): bytes placed off the device
# (the spec's own grade, indicated) and a build that does not reach it (possible), the likelier first.
PLACEMENT_READING = (None, "memory.layers_on_device")
BUILD_READING = (Grade.possible, "platform.fallback_logged")


def build_issues(p) -> list:
    """Evidence of a build or platform that does not run the fast path on this GPU. A logged line the canonical step
    read as another fact (llama.cpp's layers line, Ollama's CPU/GPU split, a default MoE config) is that fact's, not
    a fallback of the build."""
    found = []
    if p.get("build_type") == "debug":
        found.append(ev("platform.build_type", "debug"))
    if p.get("asserts_enabled") is True:
        found.append(ev("platform.asserts_enabled", True))
    if p.get("kernels_for_arch") is False:
        found.append(ev("platform.kernels_for_arch", False))
        if "gpu_arch" in p:
            found.append(ev("platform.gpu_arch", p["gpu_arch"]))
    if p.get("fallback_logged") and not p.get("fallback_read_as"):
        found.append(ev("platform.fallback_logged", p["fallback_logged"]))
    if p.get("feature_gated_off"):
        found.append(ev("platform.feature_gated_off", p["feature_gated_off"]))
    return found


def oversubscribed(p) -> bool:
    """More threads than cores, or than physical cores where the model's kernels run on the CPU: two threads
    on one core's SMT siblings share its vector units and caches, and a matmul split across both waits at
    every barrier for the slower one; or a quota that throttles the loop."""
    threads = p.get("cpu_threads")
    cores = [p.get("cpu_cores_available")] + ([p.get("cpu_physical_cores")] if p.get("device_api") == "cpu" else [])
    over = threads is not None and any(c is not None and threads > c for c in cores)
    return over or p.get("cpu_throttled_fraction", 0.0) > CPU_THROTTLED


def clock_ratio(p) -> float | None:
    """Lowest current/max clock ratio among the clocks the probe read."""
    ratios = [
        p[cur] / p[top]
        for cur, top in (("sm_clock_mhz", "max_sm_clock_mhz"), ("mem_clock_mhz", "max_mem_clock_mhz"))
        if cur in p and top in p and p[top] > 0
    ]
    return min(ratios) if ratios else None


def strained(p) -> list:
    """Heat or power that makes a GPU give up clocks, when neither clocks nor reasons were read: at
    HOT_C and above boost logic trades clocks for temperature; drawing POWER_CAP_SHARE of the enforced
    limit, or a limit set CAPPED_BELOW_DEFAULT under the board's default, the power governor sets them (unless the
    board was read drawing well under that limit: then the lowered cap never bound). Read clocks or reasons say what
    happened instead."""
    if clock_ratio(p) is not None or p.get("throttled"):
        return []
    found = []
    if p.get("temperature_c", 0) >= HOT_C:
        found.append(ev("probe.temperature_c", p["temperature_c"], "°C"))
    if p.get("power_limit_w") and p.get("power_w", 0) >= POWER_CAP_SHARE * p["power_limit_w"]:
        found += [ev("probe.power_w", p["power_w"], "W"), ev("probe.power_limit_w", p["power_limit_w"], "W")]
    below_cap = "power_w" in p and p.get("power_limit_w") and p["power_w"] < POWER_CAP_SHARE * p["power_limit_w"]
    if p.get("power_limit_w") and p.get("default_power_limit_w") and p["power_limit_w"] <= CAPPED_BELOW_DEFAULT * p["default_power_limit_w"] \
            and not below_cap:
        found += [ev("probe.power_limit_w", p["power_limit_w"], "W"), ev("probe.default_power_limit_w", p["default_power_limit_w"], "W")]
    return found


def throttled(p) -> bool:
    ratio = clock_ratio(p)
    return bool(p.get("throttled")) or (ratio is not None and ratio < CLOCK_RATIO) or bool(strained(p))


def idle_reading(facts, p) -> bool:
    """A low clock that reads as idling, not throttling: the same device ran the same work faster under other software
    (another release, engine or build: ``SOFTWARE_CHANGES``), and no throttle reason was read. Power, heat and clock
    caps belong to the board and its policy, which software leaves alone; a GPU drops to a fraction of its clock on its
    own when it has nothing to run, so low clocks on the slower side say its work is waiting or running elsewhere, an
    effect of the change."""
    return not p.get("throttled") and any(isinstance(f, RunDiff) and f.get("setting") in SOFTWARE_CHANGES for f in facts.values())


def throttle_finding(p, device_ms: float | None) -> Finding:
    """At most the device time the lower clocks stretched: ``device * (1 - ratio)``; without clocks, indicated."""
    ratio = clock_ratio(p)
    evidence = [ev("probe.throttle_reasons", ", ".join(p.get("throttled", [])) or "none reported"), *strained(p)]
    if ratio is not None:
        evidence.append(ev("probe.clock_ratio", ratio))
    bounded = ratio is not None and device_ms is not None
    return Finding(
        evidence=evidence,
        removable_ms=device_ms * (1 - ratio) if bounded else None,
        detail="" if bounded else "Clock ratio or step not measured: read clocks during a timed run to bound the gain.",
        missing=[] if ratio is not None else ["probe.sm_clock_mhz"],
    )



def heavier_format_past_the_sweep(d) -> bool:
    """A weight format's A/B whose heavier side's token runs past any accelerator's sweep while the lighter side's
    stays within it: the device path works (the lighter run shows it), and a format that holds more bytes took it
    past what the device reads: its weights did not stay on the device."""
    return (heavier_format(d) and d["figure"] in PER_TOKEN_FIGURES
            and d["slower_time"] >= DEVICE_STEP_CEILING_MS > d["faster_time"])


def streams_in_flight(m) -> float:
    """Sequences in flight beside (and with) the stream timed: the load's concurrency, or the engine's running count.
    With others running, its token waits out their work too (another request's prefill), which says nothing of where
    the bytes lie and which no sweep of the device bounds."""
    return max(m.get("concurrency", 1), m.get("running_sequences", 1))


def device_read_busy() -> Probe:
    """A probe that read the device busy (DEVICE_BUSY) while decoding: that is where the work ran."""
    return Probe(device_utilization=P(lambda busy: busy >= DEVICE_BUSY))


def beyond_any_device(on_another_machine: bool = False) -> tuple:
    """Patterns for one stream's token slower than any accelerator's sweep of its memory (DEVICE_STEP_CEILING_MS), on an
    accelerator that names no preset, with no run of the same case under it (but for one on another machine, with
    ``on_another_machine``). Not on a device a probe read busy while it decoded (DEVICE_BUSY): that is where the work
    ran. Binds ``m``, ``per_token``, ``api``."""
    return (
        AS.m << Metrics(per_token_ms=MATCH.per_token),
        Platform(device_api=P(lambda api: not on_cpu(api)) & MATCH.api),
        NOT(Device(sweep_ms=W())),
        NOT(RunDiff(figure=P(lambda f: f in PER_TOKEN_FIGURES), faster_time=P(lambda t: t < DEVICE_STEP_CEILING_MS),
                    setting=P(lambda s: not (on_another_machine and s == "hardware")))),
        NOT(device_read_busy()),
        TEST(lambda m, per_token: per_token >= DEVICE_STEP_CEILING_MS and streams_in_flight(m) <= 1),
    )


def nothing_pushed_off() -> tuple:
    """Patterns for weights not known to fit: stated to fit, or the pinned bound's weights and KV within what an engine
    leaves them (USABLE_SHARE), nothing pushed the model's bytes off the device."""
    return (NOT(Memory(weights_fit_without_offload=True)), NOT(Bound(resident_share=P(lambda share: share <= USABLE_SHARE))))


def beyond_this_device() -> tuple:
    """Patterns for one stream's token slower than twice a sweep of the named device's memory (SWEEP_MARGIN), on an
    accelerator; a run of the same case under it is ``a_run_within``'s to rule out, in the body. Not from a rate that
    counts prefill: a device's sweep is tens of milliseconds, and a request's prompt counted into its time per token
    can take a decode that runs on the device past twice that (any accelerator's ceiling, seconds, it cannot). Binds
    ``m``, ``per_token``, ``api``, ``sweep``, ``device``."""
    return (
        AS.m << Metrics(per_token_ms=MATCH.per_token),
        Platform(device_api=P(lambda api: not on_cpu(api)) & MATCH.api),
        Device(sweep_ms=MATCH.sweep, name=MATCH.device),
        NOT(Metrics(rate_includes_prefill=True)),
        NOT(device_read_busy()),
        TEST(lambda m, per_token, sweep: per_token >= SWEEP_MARGIN * sweep and streams_in_flight(m) <= 1),
    )


def a_run_within(facts, ceiling_ms: float, on_another_machine: bool = False) -> bool:
    """A run of the same case (but for one on another machine, with ``on_another_machine``) whose token is under
    ``ceiling_ms``: the device path works, and the slower run lost something else."""
    return any(isinstance(f, RunDiff) and f.get("figure") in PER_TOKEN_FIGURES and f.get("faster_time", ceiling_ms) < ceiling_ms
               and not (on_another_machine and f.get("setting") == "hardware") for f in facts.values())


def idle_while_one_stream_decodes() -> tuple:
    """Patterns for a device read idle (IDLE_DEVICE) while one stream decodes, on a platform not stated to be a CPU.
    Binds ``busy``."""
    return (
        Probe(device_utilization=idle_utilization() & MATCH.busy),
        NOT(Platform(device_api=P(lambda api: on_cpu(api)))),
        OR(Layout(batch=1), Metrics(concurrency=1)),
    )


def larger_allocation_beyond_its_size() -> tuple:
    """Patterns for runs differing only in a size that sets an allocation (the configured maximum context, the cache's
    capacity), the larger one slower by more than work following the size allows, with no trace timing the host
    copies. Binds ``d``; claim with ``spill_finding``."""
    return (
        AS.d << RunDiff(setting=P(lambda s: s in SIZED), slower=MATCH.slower, faster=MATCH.faster),
        TEST(lambda d, slower, faster: larger(slower, faster) and beyond_the_size(d) > 0),
        NOT(Budget(h2d_exposed_ms=W())),
    )


def spill_finding(d, spilled, what: str) -> Finding:
    """An A/B of an allocation's size, further apart than the size: the delta is the spill's cost, all of it at most,
    the part beyond the sizes' ratio at least."""
    beyond, unit = beyond_the_size(d), UNITS.get(d["figure"], "")
    return Finding(
        evidence=[spilled, ev(f"runs[{d['setting']}].slower", d["slower"]), ev(f"runs[{d['setting']}].faster", d["faster"]),
                  ev("runs.figure", d["figure"]), ev("runs.slower_time", d["slower_time"], unit),
                  ev("runs.faster_time", d["faster_time"], unit)],
        removable_ms=d["slower_time"] - d["faster_time"],
        step_ms=d["slower_time"],
        detail=f"{d['setting']} {d['slower']} runs {d['slowdown']:.2f}x slower than {d['faster']}, more than the "
        f"{d['slower']}/{d['faster']}-fold work sized by it could take: at least {beyond:.3g} {unit} of the delta came with {what}.",
    )


class MachineRules(RuleSet):
    @rule(SPECS["cpu-oversubscribed"], *ablation("threads"))
    def more_threads_slower(self, d):
        """More threads made it slower: the extra threads contend for cores instead of adding work."""
        return ablation_finding(d)

    @rule(SPECS["cpu-oversubscribed"], *ablation("cpu_affinity"))
    def wider_affinity_slower(self, d):
        """Letting the threads run on more cores made it slower: the added cores (efficiency cores, SMT siblings,
        another socket) are slower than the rest, and a split matmul waits at every barrier for its slowest thread."""
        return ablation_finding(d)

    @rule(SPECS["clock-throttle"], *ablation(*CLOCK_SETTINGS))
    def clock_setting_slower(self, d):
        """The same work, with only a power or clock setting changed, ran slower on one side: the setting changes
        no work, only the clocks it runs at, so the delta is what the lower clocks cost."""
        return ablation_finding(d)

    @rule(SPECS["clock-throttle"], AS.p << Probe(), Budget(device_ms=MATCH.device), TEST(lambda p: throttled(p)))
    def clock_throttle(self, p, device):
        """Not where the low clock reads as idling (``idle_reading``)."""
        return None if idle_reading(self.facts, p) else throttle_finding(p, device)

    @rule(
        SPECS["clock-throttle"],
        AS.p << Probe(),
        NOT(Budget(device_ms=W())),
        TEST(lambda p: throttled(p)),
    )
    def clock_throttle_without_budget(self, p):
        """Throttle reasons or low clocks with no budget: the device time is unknown, so the whole step
        stands in for it (a step that is all device work slows at most by the clock ratio). Not where the low clock
        reads as idling (``idle_reading``)."""
        return None if idle_reading(self.facts, p) else throttle_finding(p, self.reference_step_ms)

    @rule(SPECS["clock-throttle"], Platform(power_saving=True), NOT(Platform(cpu_clock_mhz=W())), NOT(Probe(sm_clock_mhz=W())))
    def power_saving_mode(self):
        """A power-saving mode caps clocks (CPU, GPU or a unified SoC) below what the load would run at; with no clock
        read, the mode names the cause and the same run with it off measures it."""
        return Finding(evidence=[ev("platform.power_saving", True)],
                       detail="A power-saving mode was on; the clocks it allowed were not read.")

    @rule(
        SPECS["clock-throttle"],
        Platform(cpu_clock_mhz=MATCH.now, cpu_max_clock_mhz=MATCH.top),
        TEST(lambda now, top: now < CLOCK_RATIO * top),
    )
    def cpu_clocks_down(self, now, top):
        """The CPU runs below its rated clock while tokens are generated: on a CPU device every kernel, and on a
        GPU the host's part of each step, slows with it. Indicated: how much of the step follows the clock is not
        known until the clock is held up (a performance governor) and the step timed again."""
        return Finding(
            evidence=[ev("platform.cpu_clock_mhz", now, "MHz"), ev("platform.cpu_max_clock_mhz", top, "MHz")],
            detail=f"The cores ran at {now / top:.0%} of their rated clock.",
        )

    @rule(SPECS["clock-throttle"],
          AS.r << RepeatDecline(decline=P(lambda x: x >= SUSTAINED_DECLINE), repeats=P(lambda n: n >= TREND_REPEATS)),
          TEST(lambda r: r.get("peer_decline", SUSTAINED_DECLINE) >= SUSTAINED_DECLINE))
    def slower_after_the_first_repeat(self, r):
        """The same work, run again back to back, ran fastest the first time and at least a quarter slower every time
        after: a state that builds under sustained load and stays. Heat is the usual one: the chip reaches its
        temperature or power limit and steps its clocks down, a laptop or a small box sooner than a server. Clocks
        read during a later repeat, or a pause to cool before each, decide it. Not where another run on the same
        machine held steady over as many repeats: heat slows every run on a machine alike, so a decline only one side
        of the A/B shows came with what it changed (a release that grows a buffer each generation)."""
        run = r["run"]
        return Finding(
            evidence=[ev(f"runs[{run}].repeats", r["repeats"]), ev(f"runs[{run}].figure", r["figure"]),
                      ev(f"runs[{run}].decline", r["decline"], "x")],
            detail=f"Run {run!r}: its first repeat ran {r['decline']:.3g}x faster than any of the {r['repeats'] - 1} after it.",
        )

    @rule(
        SPECS["clock-throttle"],
        AS.e << Expectation(kind="earlier_in_run"),
        AS.m << Metrics(),
        NOT(Probe(sm_clock_mhz=W())),
        NOT(RunDiff()),
        TEST(lambda m, e: (engine_gap(m, e) or 0) >= SUSTAINED_DECLINE),
    )
    def slower_later_in_the_run(self, m, e):
        """The same setup, with nothing changed, made the same work at least a quarter faster earlier in the same session
        or uptime: no setting, build or load separates the two, so what changed is the machine's state, and the state
        that builds with time under load is heat (or a power or licence cap that sets in) stepping the clocks down.
        Indicated: memory the process grew into (caches, swap) slows it the same way, and clocks and throttle reasons
        read during a slow stretch decide between them. Not where clocks were read (the clock rules weigh them), nor
        beside runs, whose A/B says what differs."""
        gap = engine_gap(m, e)
        return Finding(evidence=[ev("expected.kind", e["kind"]), *gap_evidence(m, e), ev("engine_gap", gap, "x")],
                       grade=Grade.indicated,
                       detail=f"The same setup made this work {gap:.3g}x faster earlier in the same run.")

    @rule(
        SPECS["cpu-offload"],
        Server(cpu_offload_gb=MATCH.gb),
        TEST(lambda gb: gb > 0),
        NOT(Budget(h2d_exposed_ms=W())),
    )
    def cpu_offload(self, gb):
        """Configured offload, no trace of the copies: the transfer over an assumed link is an estimate,
        so it is said, not claimed; a trace of the copies (h2d-copies) bounds the gain."""
        link = PCIE_GBS
        return Finding(
            evidence=[ev("server.cpu_offload_gb", gb, "GB"), ev("assumed_pcie_gbs", link, "GB/s")],
            detail=f"At an assumed ~{link:g} GB/s, {gb:g} GB per step would be {gb / link * 1e3:.3g} ms of transfer if not "
            "overlapped; a trace of the copies measures it.",
        )

    @rule(
        SPECS["cpu-offload"],
        Memory(weights_fit_without_offload=False),
        NOT(Server(cpu_offload_gb=W())),
        NOT(Budget(h2d_exposed_ms=W())),
    )
    def weights_do_not_fit(self):
        """The weights do not fit the device: the part that does not fit lives in host memory (offloaded, or
        its layers run on the CPU), read at host speed every step. How much is unknown: indicated."""
        return Finding(
            evidence=[ev("memory.weights_fit_without_offload", False)],
            detail="Some weights stay in host memory; the offloaded size (or the layers left on the CPU) and a trace of the "
            "copies would bound it.",
        )

    @rule(
        SPECS["cpu-offload"],
        AS.e << Expectation(kind=P(lambda k: k in SAME_SETUP_KINDS)),
        AS.m << Metrics(),
        Platform(device_api=P(lambda api: not on_cpu(api))),
        NOT(Memory(weights_fit_without_offload=True)),
        NOT(RunDiff(setting=P(lambda s: s != "several" and s not in WORKLOAD_SETTINGS))),
        TEST(lambda m, e: (engine_gap(m, e) or 0) >= HOST_READ_GAP and streams_in_flight(m) <= e.get("concurrency", 1)),
    )
    def same_setup_several_times_slower(self, m, e):
        """The same device and engine made the same work several times faster before, or set up another way, and no
        one named setting separates the two (runs that change several at once do not say which): a working device
        path moves a stream by tens of per cent, graphs or a kernel family by a few times; several times more is bytes
        read from somewhere slower than the device's memory (part of the weights or the KV cache grown into host
        memory, a driver's spill), at a tenth of its bandwidth or less, and twenty times or more most of them. Not
        where the weights are known to fit: then a build that does not reach the device is the reading
        (build-mismatch). Possible: where the layers sit (the engine's load log, its placement) says."""
        gap = engine_gap(m, e)
        return Finding(
            evidence=[ev("expected.kind", e["kind"]), *gap_evidence(m, e), ev("device_gap", gap, "x")],
            grade=Grade.possible,
            missing=["memory.layers_on_device"],
            detail=f"The same setup ran this work {gap:.3g}x faster, with no setting named between the two.",
        )

    @rule(
        COMPARISON_SPECS["regression-located"],
        AS.e << Expectation(kind="older_version"),
        NOT(RunDiff()),
        TEST(lambda e: per_stream_rate(e, expected_rate(e)) is None and "duration_s" not in e),
    )
    def an_earlier_release_was_faster_unmeasured(self, e):
        """The same setup on an earlier release is the reference, with no figure for it: the report still names one
        difference, the release, so that is where the slowdown is located, as a version A/B would place it. Possible:
        nothing measures the gap, and figures from both releases would bound what going back buys."""
        return Finding(
            evidence=[ev("expected.kind", "older_version")],
            grade=Grade.possible,
            key="engine_version",
            detail="An earlier release on the same setup is reported faster, with no figure; both releases timed alike "
            "would measure it.",
        )

    @rule(
        COMPARISON_SPECS["regression-located"],
        AS.e << Expectation(kind="older_version"),
        AS.m << Metrics(),
        NOT(RunDiff(setting="engine_version")),
        TEST(lambda m, e: not read_apart(m, e) and (engine_gap(m, e) or 0) >= SLOWER and all(stream_rates(m, e))),
    )
    def slower_than_an_earlier_release(self, m, e):
        """The same setup on an earlier release or commit is the reference, so the report is an A/B whose one stated
        difference is the release, written as an expectation rather than as two runs: the release locates the
        slowdown as a version run pair would (a wholesale change, so any mechanism may lie inside it), and the two
        figures bound what going back can buy."""
        mine, theirs = stream_rates(m, e)
        return Finding(
            evidence=[ev("expected.kind", "older_version"), *gap_evidence(m, e)],
            removable_ms=1e3 / mine - 1e3 / theirs,
            step_ms=1e3 / mine,
            key="engine_version",
            detail=f"The same setup on an earlier release ran a stream {theirs / mine:.3g}x faster; the release is the one "
            "difference stated. Gains are shares of this release's time per token.",
        )

    @rule(SPECS["cpu-offload"], *ablation("gpu_layers", "device_memory"))
    def fewer_layers_on_device_slower(self, d):
        """The same model with fewer layers on the device, or on a device with less memory, ran slower: a working set
        that fits decodes at the same speed in any memory larger than it, so the delta is what did not fit (layers
        left, or pages pushed, to host memory) cost, read at host speed every step."""
        return ablation_finding(d)

    @rule(SPECS["kv-cache-on-host"], Memory(kv_cache_on_device=False))
    def kv_cache_on_host(self):
        """The placement names the cause; what it costs waits for a budget or the A/B below."""
        return Finding(evidence=[ev("memory.kv_cache_on_device", False)])

    @rule(SPECS["kv-cache-on-host"], *ablation("kv_cache_placement"))
    def kv_cache_on_host_slower(self, d):
        """The same work with the KV cache held in host memory ran slower than with it on the device: the weights and
        the math are where they were, so the delta is the cache read over the host path every step (and attention
        run where it lies)."""
        return ablation_finding(d)

    @rule(
        SPECS["cpu-offload"],
        *ablation(*SPREAD_SETTINGS),
        Probe(device_utilization=MATCH.busy),
        TEST(lambda d, busy: idle_through_the_delta(d, busy)),
    )
    def spread_slower_while_idle(self, d, busy):
        """The model spread over more devices got slower while the device ran no more kernel time than the whole
        faster run: the added time passed with the devices idle, so it was neither their reading nor their collectives
        (a waiting collective is a running kernel). A new placement that left work on the host (layers the engine
        kept on the CPU to fit what it counted as free) is what idles them that long. Indicated: the engine's layer
        placement, or the same run with every layer on the devices, says."""
        unit = UNITS.get(d["figure"], "")
        return Finding(
            evidence=[ev(f"runs[{d['setting']}].slower", d["slower"]), ev(f"runs[{d['setting']}].faster", d["faster"]),
                      ev("runs.slower_time", d["slower_time"], unit), ev("runs.faster_time", d["faster_time"], unit),
                      ev("probe.device_utilization", busy)],
            missing=["memory.layers_on_device"],
            detail=f"{d['setting']} {d['slower']} is {d['slowdown']:.2f}x slower than {d['faster']}, yet its device ran kernels "
            f"{busy:.0%} of {d['slower_time']:.4g} {unit}, no longer than the faster run's whole {d['faster_time']:.4g}.",
        )

    @rule(
        SPECS["cpu-offload"],
        Memory(spilled_to_host_gb=MATCH.gb),
        TEST(lambda gb: gb > 0),
        NOT(Budget(h2d_exposed_ms=W())),
    )
    def device_memory_spilled(self, gb):
        """The driver placed part of the device's allocations in host memory (WDDM's shared GPU memory, or
        unified memory oversubscribed): whatever lies there, weights or KV blocks, is read over the host link
        each step it is touched. Indicated: which allocations spilled decides the cost; leaving headroom
        (a lower memory fraction) and timing again measures it."""
        return Finding(evidence=[ev("memory.spilled_to_host_gb", gb, "GB")],
                       detail=f"{gb:g} GB of device allocations live in host memory.")

    @rule(
        SPECS["cpu-offload"],
        Memory(device_memory_full=True),
        Platform(sysmem_fallback=True),
        NOT(Memory(spilled_to_host_gb=W())),
        NOT(Budget(h2d_exposed_ms=W())),
    )
    def full_device_spills(self):
        """The device had no memory left once the model loaded, under a driver that places what does not fit in host
        memory instead of failing it: whatever the engine allocated after that (caches, KV blocks, buffers) lies in
        host memory and is read over the host link each step it is touched. Indicated: how much spilled is not
        stated; the driver's shared-memory figure, or a run with headroom left, sizes it."""
        return Finding(evidence=[ev("memory.device_memory_full", True), ev("platform.sysmem_fallback", True)],
                       detail="The device was full after the load, on a driver that spills to host memory.",
                       missing=["memory.spilled_to_host_gb"])

    @rule(
        SPECS["cpu-offload"],
        Memory(spilled_to_host_gb=MATCH.gb),
        TEST(lambda gb: gb > 0),
        *larger_allocation_beyond_its_size(),
    )
    def spill_beyond_the_larger_allocation(self, gb, d):
        """Device allocations spilled to host memory, and runs differing only in a size that sets the allocation (the
        configured maximum context, the cache's capacity) are further apart than work following that size allows: the
        larger allocation no longer fit the device, and what lies in host memory is read over the host link each step.
        The A/B's delta bounds the spill's cost: all of it at most, the part beyond the sizes' ratio at least."""
        return spill_finding(d, ev("memory.spilled_to_host_gb", gb, "GB"), f"the {gb:g} GB that spilled to host memory")

    @rule(
        SPECS["cpu-offload"],
        Platform(sysmem_fallback=True),
        NOT(Memory(spilled_to_host_gb=W())),
        *larger_allocation_beyond_its_size(),
    )
    def spill_on_a_spilling_driver(self, d):
        """The same A/B on a driver that places what does not fit in host memory instead of failing the allocation
        (WDDM's shared GPU memory, unified memory): how much spilled is not stated, but a larger allocation costing
        more than its size allows is what a spill of it looks like, and the A/B's delta bounds the cost the same way."""
        return spill_finding(d, ev("platform.sysmem_fallback", True), "the part of the larger allocation the driver placed in host memory")

    @rule(
        SPECS["cpu-offload"],
        Memory(weights_on_host_fraction=MATCH.share),
        NOT(Memory(layers_on_device=W())),
        NOT(Budget(h2d_exposed_ms=W())),
        TEST(lambda share: share > 0),
    )
    def part_of_the_model_on_host(self, share):
        """A share of the model held in host memory is read (or computed) at host speed every step, a small
        fraction of the device's bandwidth: a tenth of the weights there can take as long as the rest on the
        device. Indicated: an A/B with all of it placed measures it."""
        return Finding(evidence=[ev("memory.weights_on_host_fraction", share)],
                       detail=f"{share:.0%} of the model stays in host memory.")

    @rule(
        SPECS["cpu-offload"],
        Memory(layers_on_device=MATCH.placed, layers_total=MATCH.total),
        TEST(lambda placed, total: placed < total),
        NOT(Budget(h2d_exposed_ms=W())),
    )
    def layers_left_on_host(self, placed, total):
        """Layers not placed on the device run from host memory (or on the CPU) every step, at a small fraction
        of the device's bandwidth: a few such layers can take as long as all the others. Indicated: an A/B with
        them placed measures it."""
        return Finding(
            evidence=[ev("memory.layers_on_device", placed), ev("memory.layers_total", total)],
            detail=f"{total - placed} of {total} layers stay off the device.",
        )

    @rule(
        SPECS["h2d-copies"],
        AS.b << Budget(h2d_exposed_ms=MATCH.exposed, step_ms=MATCH.step),
        NOT(Server(cpu_offload_gb=P(lambda gb: gb > 0))),
        TEST(lambda exposed, step: exposed >= MIN_H2D_MS and exposed >= MIN_H2D_SHARE * step),
    )
    def h2d_copies(self, b, exposed):
        return h2d_finding(b, exposed, [])

    @rule(
        SPECS["h2d-copies"],
        AS.b << Budget(h2d_exposed_ms=MATCH.exposed),
        Server(cpu_offload_gb=MATCH.gb),
        TEST(lambda gb, exposed: gb > 0 and exposed >= MIN_H2D_MS),
    )
    def h2d_copies_offloaded(self, b, exposed, gb):
        """A configured offload is the prime suspect, so less exposed time is worth naming; the
        measured copies replace cpu-offload's assumed link, and one hypothesis holds that time."""
        return h2d_finding(b, exposed, [ev("server.cpu_offload_gb", gb, "GB")])


    @rule(SPECS["build-mismatch"], AS.p << Platform(), TEST(lambda p: bool(build_issues(p))))
    def build_mismatch(self, p):
        """A logged fallback line alone, where the case also puts weights off the device, may be that placement
        reported (a backend resolving to offload, a cache of experts): the stated placement is the firmer evidence,
        so the line names the build only as a possibility behind it."""
        found = build_issues(p)
        detail = f"Named by {', '.join(e.name.removeprefix('platform.') for e in found)}."
        if all(e.name == "platform.fallback_logged" for e in found) and names_off_device_work(self.facts):
            return Finding(evidence=found, grade=Grade.possible,
                           detail=detail + " The case also puts weights off the device, which the line may only report.")
        return Finding(evidence=found, detail=detail)

    @rule(
        SPECS["build-mismatch"],
        AS.e << Expectation(kind="other_engine"),
        AS.m << Metrics(),
        TEST(lambda m, e: (engine_gap(m, e) or 0) >= ENGINE_GAP),
    )
    def another_engine_twice_as_fast(self, m, e):
        """The same model, work and device run at least twice as fast under another engine: the device has a fast path
        this engine's build does not reach. Possible, and behind any mechanism the case names: which path (kernels for
        this architecture, graph capture, a fused attention) a trace of both tells, and that trace bounds it."""
        gap = engine_gap(m, e)
        return Finding(
            evidence=[ev("expected.kind", "other_engine"), *gap_evidence(m, e), ev("engine_gap", gap, "x")],
            grade=Grade.possible,
            detail=f"Another engine runs the same work {gap:.3g}x faster on this device.",
        )

    @rule(
        SPECS["build-mismatch"],
        AS.e << Expectation(kind=P(lambda k: k in SAME_DEVICE_KINDS)),
        AS.m << Metrics(),
        Memory(weights_fit_without_offload=True),
        Platform(device_api=P(lambda api: api != "cpu")),
        TEST(lambda m, e: (engine_gap(m, e) or 0) >= OFF_DEVICE_GAP),
    )
    def work_not_on_the_device(self, m, e):
        """The weights fit on the device, yet a stream runs twenty times or more slower than this device's own figure
        for the same work: no setting of a working GPU path costs that much, so the work is not running on the device
        (a runtime newer than the driver supports, a CPU build or fallback). Indicated: the engine's startup log and the
        GPU's utilisation while decoding tell which."""
        gap = engine_gap(m, e)
        return Finding(
            evidence=[ev("expected.kind", e["kind"]), *gap_evidence(m, e), ev("memory.weights_fit_without_offload", True),
                      ev("device_gap", gap, "x")],
            missing=["platform.fallback_logged"],
            detail=f"One stream runs {gap:.3g}x slower than this device's own figure with the weights on the device.",
        )

    @rule(SPECS["build-mismatch"], *beyond_any_device())
    def slower_than_a_sweep_of_the_device(self, m, per_token, api):
        """One stream's token takes longer than any accelerator needs to read every byte it holds, so the step is not
        reading them there: no figure of the device's own to compare is needed. Where the case names the work off
        the device (bytes in host memory: layers left off, an offload, a spill, weights that do not fit; a grammar's
        mask built on the host) that is the reading, cpu-offload's or structured output's, and a run of the same case
        under the sweep says this build does reach the device (the slower run lost something else: its memory paged
        out, a setting). Otherwise a build or a code path that runs the model on the CPU is one reading, and the
        model's bytes placed off the device (layers on the CPU, memory paged out) the likelier one: of the incidents
        whose token ran past a sweep, placement explained twice as many as a build did. Possible: the engine's startup
        log and the GPU's utilisation while decoding tell which."""
        return self.off_device(m, per_token, api, DEVICE_STEP_CEILING_MS, "an accelerator", BUILD_READING)

    @rule(
        SPECS["build-mismatch"],
        *beyond_this_device(),
    )
    def slower_than_a_sweep_of_this_device(self, m, per_token, api, sweep, device):
        """As above, against the named device's own sweep (its memory over its bandwidth), far shorter than the
        largest accelerator's: twice it (SWEEP_MARGIN), since a step that fills the device may read it at half speed."""
        if a_run_within(self.facts, SWEEP_MARGIN * sweep):
            return None
        return self.off_device(m, per_token, api, SWEEP_MARGIN * sweep, f"{device} at half its bandwidth", BUILD_READING)

    @rule(SPECS["cpu-offload"], *beyond_any_device(on_another_machine=True), *nothing_pushed_off())
    def layers_left_off_the_device(self, m, per_token, api):
        """The likelier way the work is off the device: its layers placed on the CPU (no layers asked of the GPU, or
        fewer than the model has), or its memory paged out to the host, with a build that works. Indicated, before
        the build's reading: the engine's load log (layers offloaded to the GPU) tells them apart. Not where the
        weights are known to fit: then nothing pushed them off, and the build's reading is the one left. A run of the
        same work under the sweep on another machine leaves only this reading: the software reaches a device there,
        and the machine that lost it lost where its bytes lie (less memory, paged out)."""
        return self.off_device(m, per_token, api, DEVICE_STEP_CEILING_MS, "an accelerator", PLACEMENT_READING)

    @rule(SPECS["cpu-offload"], *beyond_this_device(), *nothing_pushed_off())
    def layers_left_off_this_device(self, m, per_token, api, sweep, device):
        """As above, against the named device's own sweep."""
        if a_run_within(self.facts, SWEEP_MARGIN * sweep, on_another_machine=True):
            return None
        return self.off_device(m, per_token, api, SWEEP_MARGIN * sweep, f"{device} at half its bandwidth", PLACEMENT_READING)

    @rule(SPECS["cpu-offload"], *idle_while_one_stream_decodes(), *nothing_pushed_off())
    def idle_device_layers_elsewhere(self, busy):
        """The device ran no kernels while one stream decoded: its work ran elsewhere. Read first as placement (layers
        on the CPU, memory paged out), as a token past the device's sweep is."""
        return self.ran_elsewhere(busy, PLACEMENT_READING)

    @rule(SPECS["build-mismatch"], *idle_while_one_stream_decodes())
    def idle_device_build_elsewhere(self, busy):
        """The same idle device read as a build or a fallback that runs the model on the CPU."""
        return self.ran_elsewhere(busy, BUILD_READING)

    def ran_elsewhere(self, busy: float, reading: tuple[Grade | None, str]) -> Finding | None:
        return self.read_as(reading, [ev("probe.device_utilization", busy)],
                            f"The device was busy {busy:.0%} of the time while one stream decoded: no kernel of that stream "
                            "ran there, so the model ran elsewhere.")

    @rule(SPECS["cpu-offload"], *ablation("quantization"), TEST(lambda d: heavier_format_past_the_sweep(d)))
    def heavier_format_off_the_device(self, d):
        """The A/B measured what the heavier weights cost, and their token is beyond any device's sweep of its memory
        while the lighter format's is not: no kernel path of a working device turns twice the bytes into a token
        slower than reading all of its memory; the heavier weights were paged out or spilled to host memory."""
        return ablation_finding(d, ev("device_sweep_ms", DEVICE_STEP_CEILING_MS, "ms"))

    @rule(SPECS["cpu-offload"], *ablation("quantization"), Memory(weights_fit_without_offload=False), TEST(lambda d: heavier_format(d)))
    def heavier_format_beyond_the_device(self, d):
        """Weights that do not fit the device, and the format with more bits slower: what does not fit is read from
        host memory every step, and the heavier format leaves more of its bytes there; the A/B measures what they cost."""
        return ablation_finding(d, ev("memory.weights_fit_without_offload", False))

    def names_a_slow_build(self) -> bool:
        return any(isinstance(f, Platform) and build_issues(f) for f in self.facts.values())

    def off_device(self, m, per_token: float, api: str, ceiling_ms: float, device: str,
                   reading: tuple[Grade | None, str]) -> Finding | None:
        """A token past the sweep, read one of two ways (``reading``: the grade and the fact that would settle it)."""
        evidence = [ev("metrics.per_token_ms", per_token, "ms"), ev("platform.device_api", api), ev("device_sweep_ms", ceiling_ms, "ms"),
                    *([ev("metrics.concurrency", 1)] if "concurrency" in m else [])]
        return self.read_as(reading, evidence, f"One stream takes {per_token:.4g} ms a token, beyond the {ceiling_ms:.4g} ms "
                            f"in which {device} reads every byte of its memory once.")

    def read_as(self, reading: tuple[Grade | None, str], evidence: list, detail: str) -> Finding | None:
        """Work found off the device, read as ``reading``; where the case already names the work off the device, that
        work's own cause is the reading and this one stays silent. Where it names a build that does not run the fast
        path (a debug build, no kernels for this architecture, a logged fallback), that build explains the slow token
        as well as placement would, and it is what the case says: placement is no longer the likelier reading."""
        if names_off_device_work(self.facts):
            return None
        if reading is PLACEMENT_READING and self.names_a_slow_build():
            return None
        grade, settles = reading
        return Finding(evidence=evidence, grade=grade, missing=[settles], detail=detail)

    @rule(SPECS["build-mismatch"], *ablation("build"), TEST(lambda d: d["slowdown"] >= FAST_PATH_GAP))
    def slower_build(self, d):
        """Two builds of the same engine, everything else equal, one slower by what a missing fast path costs
        (FAST_PATH_GAP): the slower binary does not run the fast path the other does (its arch list, its SIMD or GPU
        backend, its debug checks). Under that, the builds differ in code on the path, and the A/B locates it."""
        return ablation_finding(d)

    @rule(
        SPECS["cpu-oversubscribed"],
        Platform(device_api="cpu", cpu_threads=MATCH.threads, cpu_cores_available=MATCH.cores),
        NOT(Platform(cpu_physical_cores=W())),
        NOT(Budget(step_ms=W())),
        TEST(lambda threads, cores: threads == cores),
    )
    def every_logical_core(self, threads, cores):
        """The model's kernels run on the CPU with a thread on every core the process may use, counted as the OS counts
        them: where those are SMT siblings (two to a core on most x86 parts) two matmul threads share one core's vector
        units and wait for each other at every barrier. Possible: the physical core count decides, and a run at that
        many threads measures it. It is the lead a bare thread count gives; a profiled step has leads of its own, and
        a count that is only possible does not go before them."""
        return Finding(
            evidence=[ev("platform.cpu_threads", threads), ev("platform.cpu_cores_available", cores)],
            grade=Grade.possible,
            missing=["platform.cpu_physical_cores"],
            detail=f"{threads} threads on {cores:g} cores as the OS counts them; how many are physical cores is not stated.",
        )

    @rule(
        SPECS["cpu-oversubscribed"],
        Platform(cpu_cores_busy=MATCH.busy, cpu_cores_available=MATCH.cores, host_bound_reported=True),
        NOT(Platform(device_api="cpu")),
        TEST(lambda busy, cores: busy >= CORES_SATURATED * cores),
    )
    def cores_saturated(self, busy, cores):
        """The serving process uses every core it may while the GPU waits on the host: its CPU work queues for a core,
        whatever that work is (penalties, scheduling, output processing), so giving it cores is the fix that does not
        depend on which. On a CPU device every core busy is the model's own work, not a shortage."""
        return Finding(
            evidence=[ev("platform.cpu_cores_busy", busy), ev("platform.cpu_cores_available", cores), ev("platform.host_bound_reported", True)],
            detail=f"{busy:g} of the {cores:g} cores the process may use were busy while decoding, on a host-bound step.",
        )

    @rule(SPECS["cpu-oversubscribed"], AS.p << Platform(), TEST(lambda p: oversubscribed(p)))
    def cpu_oversubscribed(self, p):
        names = ("cpu_threads", "cpu_cores_available", "cpu_physical_cores", "cpu_throttled_fraction")
        return Finding(evidence=[ev(f"platform.{n}", p[n]) for n in names if n in p])


def h2d_finding(b, exposed: float, evidence: list) -> Finding:
    evidence = [*evidence, ev("budget.h2d_exposed_ms", exposed, "ms")]
    copying, nbytes = b.get("h2d_ms"), b.get("h2d_bytes")
    if copying is not None:
        evidence.append(ev("budget.h2d_ms", copying, "ms"))
    detail = f"{exposed:.3g} ms of host-to-device copies per step with no kernel running."
    if nbytes is not None:
        evidence.append(ev("budget.h2d_bytes", nbytes / 1e9, "GB"))
        if nbytes and copying:
            rate = nbytes / copying / 1e6  # bytes per ms -> GB/s
            evidence.append(ev("h2d_rate_gbs", rate, "GB/s"))
            detail = f"{nbytes / 1e9:.3g} GB per step at {rate:.3g} GB/s; {exposed:.3g} ms of it with no kernel running."
    return Finding(evidence=evidence, removable_ms=exposed, detail=detail)
