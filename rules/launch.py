"""Idle GPU between ready kernels: launches, graphs that do not replay, host work between steps.

A graph removes only the launch share it replaces; it cannot remove host work, syncs or
waiting for another rank. So launch rules claim the launch part and nothing more, and host
rules claim the host part.
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
    Graph,
    Grade,
    Host,
    KernelClass,
    Layout,
    Memory,
    Metrics,
    Platform,
    Probe,
    QuotedBound,
    Reference,
    RuleSet,
    RunDiff,
    Server,
    Shares,
    Speculation,
    ev,
    load_specs,
    rule,
)

from diagnoser.rules.comparison import ablation, ablation_finding
from diagnoser.rules.rates import beyond_batching, engine_gap, gap_evidence, stream_rates
from diagnoser.rules.speculation import LONG_CONTEXT, drafts_per_cycle, speculating_and_not, yield_per_cycle

SPECS = load_specs(__file__)

# A part worth a hypothesis: at least 8 % of the step and 0.1 ms (below that, timer noise).
MIN_PART_SHARE = 0.08
MIN_PART_MS = 0.1
# The least a kernel launch costs the host (the runtime takes 5-20 us a launch, SLOW_LAUNCH_US's reading): an eager
# step issues its kernels one after another, so it cannot take less than their count times this.
MIN_LAUNCH_US = 5.0
# Submissions that take at least half the step to issue pace it: the device cannot run ahead of them.
LAUNCH_PACED_SHARE = 0.5


# One stream decoding back to back keeps a device whose step is its kernels busy all the time (nvidia-smi counts a
# sample busy when any kernel ran in it); at 80 % or less, a fifth of every step or more is the device waiting on
# the host for its next kernel, beyond a sampling counter's few per cent of jitter.
MAX_BUSY = 0.8


# A utilisation reading this low while one stream decodes says no kernel of it ran on the device: a launch-bound decode
# still runs its kernels between the launches (small decode kernels last a few microseconds against 5-20 us to launch
# each), a fifth of the step or more; 0-2 % is the work running elsewhere (a CPU path, layers on the host).
IDLE_DEVICE = 0.02


def idle_utilization() -> P:
    """A device utilisation at or under IDLE_DEVICE: no kernel of the step ran there. Join it with ``& MATCH.x`` to
    bind the reading too."""
    return P(lambda busy: busy <= IDLE_DEVICE)


def device_read_idle() -> Probe:
    """A probe that read the device idle (IDLE_DEVICE) while decoding."""
    return Probe(device_utilization=idle_utilization())


# GPU idle between decode steps that is worth naming with no step to hold it against: a millisecond is dozens of
# kernel launches' worth of host work (5-20 us each), more than any engine's per-step bookkeeping should take.
IDLE_GAP_MS = 1.0


# What a decode step costs whatever it reads: an eager step launches a few hundred kernels at a few microseconds
# each, and an engine's per-step host work takes a few hundred microseconds more. A step three times a floor under
# that is paced by these costs more likely than by memory.
FIXED_STEP_MS = 1.0
FIXED_COST_RATIO = 3.0


# Two runs within 1 % of each other: a benchmark that repeats to a few per cent saw the setting move nothing.
NO_EFFECT = 0.01


# What one speculation cycle's own work costs, in ordinary decode steps, for one stream: verifying k+1 tokens reads the
# weights once, as an ordinary step does (VERIFY_STEPS allows for the longer attention and sampling over k+1 rows), and a
# drafted token costs at most DRAFT_STEP_SHARE of a step (a head or a layer is a few per cent of one, a draft model a
# tenth of the target's size a fifth of its step or less, being latency-bound).
VERIFY_STEPS = 1.5
DRAFT_STEP_SHARE = 0.5


def cycle_beyond_its_work(s, on_ms: float, off_ms: float) -> tuple[float, float, float, float] | None:
    """(cycle ms, ceiling ms, drafts, tokens per cycle) when a speculation cycle, the time per emitted token times the
    tokens it emits, costs more than verifying and drafting can (the ceiling); None when it does not or is unknown."""
    k, tokens = drafts_per_cycle(s), yield_per_cycle(s)
    if k is None or tokens is None:
        return None
    cycle, ceiling = on_ms * tokens, off_ms * (VERIFY_STEPS + k * DRAFT_STEP_SHARE)
    return (cycle, ceiling, k, tokens) if cycle > ceiling else None


def notable(part_ms: float, step_ms: float) -> bool:
    return part_ms >= MIN_PART_MS and part_ms >= MIN_PART_SHARE * step_ms


def host_without_profiler(host_ms: float, profiled_step_ms: float, unprofiled_step_ms: float) -> float:
    """The host part less what the profiler added to the step (never below zero)."""
    return max(0.0, host_ms - max(0.0, profiled_step_ms - unprofiled_step_ms))


# The scheduler owns the host part when it takes at least 30 % of it.
SCHEDULER_SHARE = 0.3


# A decode step reads at most every byte of the device's memory once: 512 GB of unified memory at 819 GB/s (the
# largest, an M3 Ultra) is 0.63 s, 96 GB of shared DDR5 behind an integrated GPU at ~90 GB/s about 1.1 s. A token
# slower than 2 s on an accelerator is not its device's step: the time is spent off the device.
DEVICE_STEP_CEILING_MS = 2000.0
# A step on a named device takes at most this many of its sweeps (all its memory at its datasheet bandwidth).
SWEEP_MARGIN = 2.0


def within_a_sweep() -> tuple:
    """Patterns for a stream's token (if timed) no slower than any accelerator needs to read every byte it holds.
    Past that the time is not spent between its kernels. The named device's own sweep is ``beyond_a_sweep``'s, in the
    body: it compares two facts, which no single pattern can."""
    return (NOT(Metrics(per_token_ms=P(lambda t: t >= DEVICE_STEP_CEILING_MS))),)


def beyond_a_sweep(facts) -> bool:
    """A stream's token slower than twice the named device's sweep (SWEEP_MARGIN): its memory read at half speed."""
    sweeps = [f["sweep_ms"] for f in facts.values() if isinstance(f, Device) and "sweep_ms" in f]
    tokens = [f["per_token_ms"] for f in facts.values() if isinstance(f, Metrics) and "per_token_ms" in f]
    return any(t >= SWEEP_MARGIN * s for t in tokens for s in sweeps)


def on_cpu(api) -> bool:
    """The engine runs on the host's CPU: there are no CUDA graphs to turn on, so graphs off is no fault."""
    return isinstance(api, str) and api.strip().lower() == "cpu"


def not_replaying(g) -> bool:
    """The trace or log shows no graph replay at the live batch."""
    return g.get("status") == "none" or g.get("replayed_at_live_batch") is False


def within_capture(g) -> bool:
    """The live batch (in the capture list's unit) is one the capture list covers, or either is unknown."""
    live, largest = g.get("live_units"), g.get("max_captured_batch")
    return live is None or largest is None or live <= largest


def replayed_size(live: int, sizes) -> int | None:
    """The captured size a live batch between captured sizes replays at, padded: the smallest one above it (None when
    the live batch is captured itself, or above every size)."""
    above = [s for s in sizes if s >= live]
    return None if not above or live in above else min(above)


def padded_share(live: int, sizes) -> float:
    """The share of the replayed graph's rows that are padding."""
    size = replayed_size(live, sizes)
    return 0.0 if size is None else (size - live) / size


# One host thread flat out: about one core busy (ONE_THREAD_BUSY), and well short of two (ONE_THREAD_MAX: a second
# busy thread would bring it near two).
ONE_THREAD_BUSY = 0.9
ONE_THREAD_MAX = 1.5


# A kernel or graph launch costs the host 5-20 us (a graph launch about as much as one kernel's); 100 us or more, five
# times the slowest of those, is the call itself slowed.
SLOW_LAUNCH_US = 100.0


# A quarter or more of the replayed rows are padding: where a capture list is sparse for the live batch (5 -> 8,
# 10 -> 16), not the steady steps of 8 between larger sizes (under a quarter past 24: 25 -> 32 pads 22 %).
PADDED_SHARE = 0.25


# A decode loop that launches kernels keeps one core busy, two with a detokenizer or a scheduler beside it; this
# many busy cores while an accelerator decodes are computing, not launching.
COMPUTING_CORES = 4


def launches_per_step(facts) -> float:
    """The kernels launched one by one a step: the kernel classes' counts summed, or a graph section's count of
    launches outside graphs, whichever says more (a count of some classes is part of the whole)."""
    classes = sum(f["count_per_step"] for f in facts.values() if isinstance(f, KernelClass) and "count_per_step" in f)
    graphed = max((f["kernel_launches_per_step"] for f in facts.values()
                   if isinstance(f, Graph) and "kernel_launches_per_step" in f), default=0.0)
    return max(classes, graphed)


def launch_paced(facts, step: float) -> Finding | None:
    """Launches pace the step when issuing its kernels one by one takes half of it or more at a launch's least cost."""
    count = launches_per_step(facts)
    issue_ms = count * MIN_LAUNCH_US / 1e3
    if issue_ms < LAUNCH_PACED_SHARE * step:
        return None
    graphs_off = any(isinstance(f, Server) and f.get("cuda_graphs") is False for f in facts.values())
    return Finding(
        evidence=[ev("kernel_launches_per_step", count), ev("reference.step_ms", step, "ms")],
        grade=Grade.indicated if graphs_off else Grade.possible,
        detail=f"{count:g} kernels a step take at least {issue_ms:.3g} ms to launch at {MIN_LAUNCH_US:g} us each, "
        f"{issue_ms / step:.0%} of the {step:.4g} ms step.",
    )


def off_device_work(f) -> bool:
    """The case names work done off the device: some of the model's bytes in host memory (offloaded, spilled, layers
    left off the device, weights that do not fit it), a grammar's mask computed on the host each step, or many host
    cores busy beside an accelerator (part of the model computed on them)."""
    if isinstance(f, Server):
        return (f.get("cpu_offload_gb") or 0) > 0 or f.get("structured_output") is True
    if isinstance(f, Platform):
        return (f.get("cpu_cores_busy") or 0) >= COMPUTING_CORES and not on_cpu(f.get("device_api"))
    if not isinstance(f, Memory):
        return False
    placed, total = f.get("layers_on_device"), f.get("layers_total")
    return (f.get("weights_fit_without_offload") is False or (f.get("weights_on_host_fraction") or 0) > 0
            or (f.get("spilled_to_host_gb") or 0) > 0 or (None not in (placed, total) and placed < total))


def names_off_device_work(facts) -> bool:
    return any(off_device_work(f) for f in facts.values())


def one_stream_speculation_ab() -> tuple:
    """Patterns for speculation on and off for one stream, whose cycle costs more than verifying and drafting can
    (``cycle_beyond_its_work``). Binds ``s``, ``before``, ``base``, ``other``."""
    return (
        AS.s << Speculation(),
        RunDiff(setting="speculative", before=MATCH.before, base_time=MATCH.base, other_time=MATCH.other),
        OR(Metrics(concurrency=1), Layout(batch=1)),
        NOT(Metrics(concurrency=P(lambda c: c > 1))),
        TEST(lambda s, before, base, other: cycle_beyond_its_work(s, *speculating_and_not(before, base, other))),
    )


def short_context() -> tuple:
    """Patterns for speculation read at a context under LONG_CONTEXT: there a step is mostly the weights' read, which a
    verify of k+1 tokens pays once. From LONG_CONTEXT on the KV read can be most of a step, and a verify that reads it
    for each of its k+1 query tokens costs up to k+1 steps with no work outside it (``long-context-slowdown``)."""
    return (NOT(Speculation(context=P(lambda n: n >= LONG_CONTEXT))), NOT(Metrics(input_tokens=P(lambda n: n >= LONG_CONTEXT))))


def cycle_finding(s, on: float, off: float, ordinary, reading: str = "") -> Finding:
    cycle, ceiling, k, tokens = cycle_beyond_its_work(s, on, off)
    return Finding(
        evidence=[ev("time_per_token_ms", on, "ms"), ordinary, ev("tokens_per_cycle", tokens), ev("drafts_per_cycle", k),
                  ev("cycle_ms", cycle, "ms"), ev("draft_and_verify_at_most_ms", ceiling, "ms")],
        removable_ms=(cycle - ceiling) / tokens,
        step_ms=on,
        at_least=True,
        detail=f"A cycle emits {tokens:.3g} tokens in {cycle:.4g} ms, {cycle / off:.3g} ordinary steps; verifying {k + 1:.3g} tokens "
        f"and drafting {k:.3g} take at most {ceiling:.4g} ms where the weights' read makes the step. {reading}The gain is the rest, "
        "per emitted token.",
    )


def share_finding(part: str, share: float) -> Finding:
    """A budget part known only as a share of a step whose length nobody gave: measured as a share,
    so the most it can buy is known as a ratio, but there are no milliseconds to claim yet."""
    return Finding(
        evidence=[ev(f"budget_shares.{part}", share)],
        detail=f"{share:.0%} of the step: at most {1 / (1 - share):.3g}x if all of it went; a step time makes it a gain.",
    )


class LaunchRules(RuleSet):

    @rule(SPECS["graphs-off"], *ablation("cuda_graphs"))
    def graphs_off_measured(self, d, parent_cap_ms):
        """Graphs on and off at the same workload: the delta is the launch cost graphs remove (on a CPU the
        eager flag turns compilation off instead: compile-off)."""
        if self.platform_is_cpu():
            return None
        return ablation_finding(d, ev("server.cuda_graphs", False))

    @rule(SPECS["launch-gaps"], Budget(launch_ms=MATCH.launch, step_ms=MATCH.step), TEST(lambda launch, step: notable(launch, step)))
    def launch_gaps(self, launch, step):
        return Finding(evidence=[ev("budget.launch_ms", launch, "ms"), ev("budget.step_ms", step, "ms")], removable_ms=launch)

    @rule(SPECS["launch-gaps"], Graph(launch_cost_us=MATCH.launch_us), TEST(lambda launch_us: launch_us >= SLOW_LAUNCH_US))
    def slow_launch_call(self, launch_us):
        """A launch, of one kernel or of a whole graph, that costs the host several times what the runtime takes for
        one: the call itself is slowed (a library interposed on the runtime, such as a profiler or a tracer, or a debug
        or sanitizer runtime), and every step waits on it before its kernels run. Indicated: the launches a step makes
        would bound it."""
        return Finding(evidence=[ev("graph.launch_cost_us", launch_us, "us")],
                       detail=f"A launch costs {launch_us:.4g} us on the host, against the 5-20 us the runtime takes for one.")

    @rule(
        SPECS["launch-gaps"],
        Reference(step_ms=MATCH.step),
        OR(KernelClass(count_per_step=W()), Graph(kernel_launches_per_step=W())),
        NOT(Graph(status="full")),
        NOT(Budget()),
    )
    def kernels_too_many_to_issue(self, step):
        """The step's kernels, counted, take the host at least their count times a launch's least cost to issue, and
        that is half the step or more: unless a graph replays them, the device waits on the host's submissions for that
        long, so launches pace the step. Indicated where graphs are stated off; possible where nothing says how they
        were launched. A timeline's gaps before ready kernels measure it."""
        return launch_paced(self.facts, step)

    @rule(
        SPECS["launch-gaps"],
        Budget(step_ms=MATCH.step, launch_ms=0, host_ms=0, unattributed_ms=MATCH.idle),
        OR(KernelClass(count_per_step=W()), Graph(kernel_launches_per_step=W())),
        NOT(Graph(status="full")),
        TEST(lambda idle, step: notable(idle, step)),
    )
    def kernels_too_many_for_the_idle(self, step, idle):
        """A budget that times the step and its kernels but not what the device waited on leaves the rest idle: on one
        stream, waiting on the host. Where the kernels, counted, take half the step or more to issue, launches fill that
        idle: at most all of it, which graph replay or fewer kernels can remove."""
        finding = launch_paced(self.facts, step)
        if finding is None:
            return None
        finding.evidence.append(ev("budget.unattributed_ms", idle, "ms"))
        finding.removable_ms, finding.grade = idle, None
        return finding

    @rule(SPECS["launch-gaps"], *ablation("gpu_scheduling"))
    def os_scheduled_submissions_slower(self, d):
        """The same work with the GPU's queue scheduled by the OS on the CPU (hardware GPU scheduling off) and by the
        GPU itself: every submission waits on the host's scheduler, so the GPU idles before ready kernels; the delta
        is that wait."""
        return ablation_finding(d)

    @rule(SPECS["graphs-off"], Server(cuda_graphs=False))
    def graphs_off_by_flag(self, parent_cap_ms):
        if self.platform_is_cpu():
            return None
        return Finding(evidence=[ev("server.cuda_graphs", False)], removable_ms=parent_cap_ms)

    @rule(SPECS["graphs-off"], Graph(status="none"), NOT(Server(cuda_graphs=True)))
    def graphs_off_in_trace(self, parent_cap_ms):
        if self.platform_is_cpu():
            return None
        return Finding(evidence=[ev("graph.status", "none")], removable_ms=parent_cap_ms)

    @rule(
        SPECS["graph-capture-too-small"],
        AS.g << Graph(live_units=MATCH.live, max_captured_batch=MATCH.largest),
        TEST(lambda live, largest: live > largest),
    )
    def graph_capture_too_small(self, g, live, largest, parent_cap_ms):
        """Compared in the capture list's unit: tokens when verification feeds k+1 tokens per sequence."""
        evidence = [ev("graph.live_batch_size", g["live_batch_size"])]
        if live != g["live_batch_size"]:
            evidence += [
                ev("graph.capture_unit", g.get("capture_unit")),
                ev("graph.query_tokens_per_sequence", g.get("query_tokens_per_sequence")),
                ev("graph.live_units", live),
            ]
        return Finding(evidence=[*evidence, ev("graph.max_captured_batch", largest)], removable_ms=parent_cap_ms)

    @rule(
        SPECS["graph-capture-too-small"],
        AS.g << Graph(live_units=MATCH.live, captured_batch_sizes=MATCH.sizes),
        TEST(lambda live, sizes: padded_share(live, sizes) >= PADDED_SHARE),
        OR(Expectation(), RunDiff()),
        NOT(Layout(routed_experts=False)),
        NOT(Graph(status="none")),
    )
    def padded_to_a_larger_graph(self, g, live, sizes):
        """A live batch between captured sizes replays the next size up: its padded rows run through every layer.
        A dense decode step that reads its weights once hardly notices them; a mixture of experts routes them too,
        and each expert they reach is read that step. Not for a model known to have no experts, nor without a figure
        it falls short of (an expected one, or another run). Indicated: the same load with the live size captured too
        measures it."""
        size = replayed_size(live, sizes)
        return Finding(
            evidence=[ev("graph.live_units", live), ev("graph.captured_batch_sizes", ", ".join(map(str, sizes))),
                      ev("graph.replayed_size", size)],
            key="padded",
            detail=f"{live} live rows replay the graph captured for {size}: {size - live} padded rows "
            f"({(size - live) / size:.0%} of the replay) are computed, and routed to experts on a mixture of experts.",
        )

    @rule(
        SPECS["graph-not-replaying"],
        Server(cuda_graphs=True),
        AS.e << Expectation(concurrency=MATCH.theirs),
        AS.m << Metrics(concurrency=MATCH.mine),
        NOT(Graph()),
        TEST(lambda e, m, mine, theirs: mine < theirs and beyond_batching(e, m)),
    )
    def fewer_streams_slower_with_graphs(self, e, m, mine, theirs):
        """Fewer streams never get less each: a step of fewer sequences reads the same weights and less KV. With
        graphs on, a lower load slower per stream than a higher one pays something per step the higher load did
        not: the small batch run eager (not captured, or a path that skips the graph), or a per-step wait that more
        work would have hidden (idle ranks stepping in lockstep with the busy one). Indicated: a trace at the lower
        load shows whether its steps replay."""
        r_m, r_e = stream_rates(m, e)
        if not r_m < r_e:
            return None
        return Finding(
            evidence=[ev("server.cuda_graphs", True), ev("metrics.concurrency", mine), ev("metrics.per_stream_tokens_per_s", r_m),
                      ev("expected.concurrency", theirs), ev("expected.per_stream_tokens_per_s", r_e)],
            grade=Grade.indicated,
            detail=f"At {mine} stream(s) each gets {r_m:.4g} tokens/s, at {theirs} each gets {r_e:.4g}: {r_e / r_m:.3g}x more with more load.",
        )

    @rule(
        SPECS["graph-not-replaying"],
        NOT(Server(cuda_graphs=False)),
        AS.g << Graph(),
        TEST(lambda g: not_replaying(g) and within_capture(g)),
    )
    def graph_not_replaying(self, g, parent_cap_ms):
        """Graphs on, yet the live batch ran without one. With the setting unknown only a log saying this batch
        ran eager counts: a trace with no graph launches at all is graphs off."""
        if not self.graphs_on() and g.get("replayed_at_live_batch") is not False:
            return None
        evidence = [ev("server.cuda_graphs", True)] if self.graphs_on() else []
        evidence += [ev(f"graph.{n}", g[n]) for n in ("status", "replayed_at_live_batch", "live_units", "max_captured_batch") if n in g]
        known = "max_captured_batch" in g and "live_units" in g
        detail = "" if known else "The capture sizes or the live batch are unknown: check that the live batch is captured."
        return Finding(evidence=evidence, removable_ms=parent_cap_ms, detail=detail)

    @rule(
        SPECS["host-overhead"],
        Budget(host_ms=MATCH.host, step_ms=MATCH.step),
        NOT(Budget(unprofiled_step_ms=W())),
        TEST(lambda host, step: notable(host, step)),
    )
    def host_overhead(self, host, step):
        return Finding(evidence=[ev("budget.host_ms", host, "ms"), ev("budget.step_ms", step, "ms")], removable_ms=host)

    @rule(
        SPECS["host-overhead"],
        Budget(host_ms=MATCH.host, step_ms=MATCH.step, unprofiled_step_ms=MATCH.unprofiled),
        TEST(lambda host, step, unprofiled: notable(host_without_profiler(host, step, unprofiled), step)),
    )
    def host_overhead_without_profiler(self, host, step, unprofiled):
        """The profiler's own cost lands in the gaps between ops. When the same step, timed without
        it, is shorter, that difference is host time the service never pays, and the gain is a
        share of the unprofiled step."""
        removable = host_without_profiler(host, step, unprofiled)
        detail = ""
        if removable < host:
            detail = (f"The profiled step is {step - unprofiled:.3g} ms longer than the step timed without the profiler; "
                      "that much of the host part is the profiler's own.")
        return Finding(
            evidence=[ev("budget.host_ms", host, "ms"), ev("budget.step_ms", step, "ms"), ev("budget.unprofiled_step_ms", unprofiled, "ms")],
            removable_ms=removable,
            step_ms=min(step, unprofiled),
            detail=detail,
        )

    @rule(
        SPECS["host-overhead"],
        Host(gap_between_steps_ms=MATCH.gap),
        Reference(step_ms=MATCH.step),
        NOT(Budget()),
        TEST(lambda gap, step: notable(gap, step)),
    )
    def idle_between_steps(self, gap, step):
        """No budget, but the GPU's idle time between steps was read: the next step waits that long on the host."""
        return Finding(evidence=[ev("host.gap_between_steps_ms", gap, "ms"), ev("reference.step_ms", step, "ms")], removable_ms=gap)

    @rule(
        SPECS["host-overhead"],
        Host(gap_between_steps_ms=MATCH.gap),
        NOT(Reference(step_ms=W())),
        NOT(Budget()),
        TEST(lambda gap: gap >= IDLE_GAP_MS),
    )
    def idle_between_steps_untimed(self, gap):
        """No step time to hold it against: a millisecond of GPU idle between decode steps is dozens of kernels'
        worth of host work on the critical path, whatever the step; its share needs the step."""
        return Finding(evidence=[ev("host.gap_between_steps_ms", gap, "ms")], grade=Grade.indicated,
                       detail=f"The GPU idles {gap:.3g} ms between steps; the per-token time would bound the share.")

    @rule(
        SPECS["host-overhead"],
        Bound(floor_ms=MATCH.floor, observed_step_ms=MATCH.observed),
        NOT(Budget()),
        NOT(QuotedBound(bytes_basis="active_parameters")),
        TEST(lambda floor, observed: floor <= FIXED_STEP_MS and observed >= FIXED_COST_RATIO * floor),
    )
    def floor_under_the_fixed_costs(self, floor, observed):
        """The bytes of a step take less time than a step's fixed costs: an eager step launches a few hundred
        kernels at a few microseconds each, and the engine's own per-step work (scheduling, inputs, outputs) takes
        a few hundred microseconds more. A step several times such a floor is paced by those costs, not by memory,
        most likely: possible, as the gap alone proves nothing; a timeline of the steps tells host from device. Not on a
        floor of active-parameter bytes: those understate the traffic, so the floor is low by the bytes left out."""
        return Finding(
            evidence=[ev("bound.floor_ms", floor, "ms"), ev("bound.observed_step_ms", observed, "ms")],
            grade=Grade.possible,
            detail=f"The floor is {floor:.3g} ms, under the {FIXED_STEP_MS:g} ms a step's launches and host work take; "
            f"the step is {observed / floor:.3g}x the floor.",
        )

    @rule(SPECS["host-overhead"], *one_stream_speculation_ab(), *short_context())
    def speculation_cycle_beyond_its_work(self, s, before, base, other):
        """Speculation on and off for one stream, with what a cycle emits and drafts known: the time per emitted token
        times the tokens a cycle emits is the cycle, and it costs more than verifying k+1 tokens and drafting k can
        (VERIFY_STEPS and DRAFT_STEP_SHARE of the ordinary step, the run with speculation off). The rest is work between
        them that is neither: bookkeeping, state copied to the host and back, a sync per cycle. At least the excess per
        emitted token goes."""
        on, off = speculating_and_not(before, base, other)
        return cycle_finding(s, on, off, ev("runs.speculative_off_time", off, "ms"))

    @rule(
        SPECS["host-overhead"],
        AS.s << Speculation(ordinary_step_ms=MATCH.off),
        Metrics(per_token_ms=MATCH.on),
        OR(Metrics(concurrency=1), Layout(batch=1)),
        NOT(Metrics(concurrency=P(lambda c: c > 1))),
        *short_context(),
        NOT(RunDiff(setting="speculative")),
        TEST(lambda s, on, off: cycle_beyond_its_work(s, on, off)),
    )
    def speculation_cycle_beyond_its_ordinary_step(self, s, on, off):
        """The same, held against the ordinary step the case states instead of a run with speculation off."""
        return cycle_finding(s, on, off, ev("speculation.ordinary_step_ms", off, "ms"))

    @rule(SPECS["host-overhead"], *ablation("async_scheduling"))
    def overlap_measured(self, d):
        """Scheduling overlapped with the running step, and not, at the same workload: the delta is the host's work
        between steps (scheduling, input preparation, output handling) that the overlap hides."""
        return ablation_finding(d, ev("server.async_scheduling", False))

    @rule(
        SPECS["host-overhead"],
        AS.d << RunDiff(setting="async_scheduling", ratio=MATCH.ratio),
        AS.m << Metrics(),
        AS.e << Expectation(),
        TEST(lambda ratio: abs(ratio - 1) <= NO_EFFECT),
    )
    def overlap_without_effect(self, d, ratio, m, e):
        """Overlapped scheduling on and off time the same, while the build runs slower than its reference: where the
        overlap takes effect it hides the host's work between steps, so no difference at all says it did not (a
        setting or a path that silently serialises it again, a sync every step) and that work is on the critical path
        again. Indicated, not timed: the way back to the reference is the most it could give, and a timeline of the
        step says how much host work there is to hide."""
        gap = engine_gap(m, e)
        if gap is None or gap <= 1 + NO_EFFECT:
            return None
        return Finding(
            evidence=[ev(f"runs[async_scheduling].{d['before']}", d["base_time"]), ev(f"runs[async_scheduling].{d['after']}", d["other_time"]),
                      ev("runs.ratio", ratio), *gap_evidence(m, e)],
            grade=Grade.indicated,
            detail=f"Async scheduling {d['before']} and {d['after']} time the same ({ratio:.2f}x), yet the reference ran "
            f"{gap:.3g}x faster: the overlap hides nothing, so the host's work between steps is back on the critical path.",
        )

    @rule(SPECS["host-overhead"], Platform(host_bound_reported=True), NOT(Budget()))
    def host_bound_reported(self):
        """A profile or the maintainers found the loop CPU-bound: names the cause, bounds nothing."""
        return Finding(evidence=[ev("platform.host_bound_reported", True)])

    @rule(SPECS["scheduler-overhead"], Host(scheduler_ms=MATCH.sched))
    def scheduler_overhead(self, sched, parent_cap_ms):
        if parent_cap_ms is None or sched < SCHEDULER_SHARE * parent_cap_ms:
            return None
        return Finding(evidence=[ev("host.scheduler_ms", sched, "ms")], removable_ms=sched)

    @rule(
        SPECS["scheduler-overhead"],
        Host(scheduler_ms=MATCH.sched),
        Reference(step_ms=MATCH.step),
        NOT(Server(async_scheduling=True)),
        TEST(lambda sched, step: notable(sched, step)),
    )
    def scheduler_overhead_standalone(self, sched, step, parent_cap_ms):
        """No host part to compare with: the measured scheduler time is the claim, unless scheduling
        overlaps the running step (then it is not on the critical path)."""
        if parent_cap_ms is not None:
            return None
        return Finding(evidence=[ev("host.scheduler_ms", sched, "ms"), ev("reference.step_ms", step, "ms")], removable_ms=sched)

    @rule(
        SPECS["host-overhead"],
        Probe(device_utilization=MATCH.busy),
        Platform(cpu_cores_busy=MATCH.cores),
        AS.m << Metrics(concurrency=P(lambda c: c > 1), waiting_requests=0),
        TEST(lambda busy, cores: IDLE_DEVICE < busy <= MAX_BUSY and ONE_THREAD_BUSY <= cores < ONE_THREAD_MAX),
    )
    def one_host_thread_paces_a_full_load(self, busy, cores, m):
        """Many streams in flight and none waiting, yet the device idles, while the host keeps one core busy and no
        more: a device with work admitted waits on the one host thread that feeds it (an API server, a detokenizer, a
        scheduler loop under one interpreter lock), which runs flat out. With requests waiting, admission could leave
        the device short of work instead; with several cores busy, the host is not one loop."""
        return Finding(
            evidence=[ev("probe.device_utilization", busy), ev("platform.cpu_cores_busy", cores),
                      ev("metrics.concurrency", m["concurrency"]), ev("metrics.waiting_requests", 0)],
            detail=f"The device ran kernels {busy:.0%} of the time with {m['concurrency']:g} requests in flight and none waiting, "
            f"while the host kept {cores:.3g} cores busy: one thread, flat out.",
        )

    @rule(SPECS["host-overhead"], Probe(device_utilization=MATCH.busy), Layout(batch=1), *within_a_sweep(),
          TEST(lambda busy: IDLE_DEVICE < busy <= MAX_BUSY))
    def idle_device_batch_of_one(self, busy):
        return None if beyond_a_sweep(self.facts) else self.idle_device(busy, ev("workload.batch", 1))

    @rule(SPECS["host-overhead"], Probe(device_utilization=MATCH.busy), Metrics(concurrency=1), *within_a_sweep(),
          TEST(lambda busy: IDLE_DEVICE < busy <= MAX_BUSY))
    def idle_device_one_request(self, busy):
        return None if beyond_a_sweep(self.facts) else self.idle_device(busy, ev("metrics.concurrency", 1))

    def idle_device(self, busy: float, one_stream) -> Finding | None:
        """A single stream leaves no other work to fill the device's idle time: while it does not run that stream's
        kernels it waits on the host, for the next launch (a gap between kernels, which replaying them removes) or for
        the host's own work between steps (sampling, scheduling, output handling, a copy the loop waits for); a
        timeline of the step tells which. Of the incidents read so far with such a reading and a settled cause on the
        host, host work between steps outnumbered launch gaps, so the host bucket is named. With many streams the device can
        also idle for want of work (admission, prefill, a client that waits), so the figure alone names nothing there.
        Work the case puts off the device (layers or weights in host memory, a grammar's mask) idles it while the
        host computes its part: that wait is those causes', not a gap between kernels; so is a token slower than the
        device's whole sweep of its memory, which no launch pattern between its kernels adds up to, and a device that
        ran nothing at all (IDLE_DEVICE): the stream's kernels run elsewhere, not between launches."""
        if names_off_device_work(self.facts):
            return None
        return Finding(
            evidence=[ev("probe.device_utilization", busy), one_stream],
            detail=f"The device ran kernels {busy:.0%} of the time while one stream decoded; the rest of each step it waited.",
        )

    @rule(SPECS["launch-gaps"], Shares(launch=MATCH.share), TEST(lambda share: share >= MIN_PART_SHARE))
    def launch_share(self, share):
        return share_finding("launch", share)

    @rule(SPECS["host-overhead"], Shares(host=MATCH.share), TEST(lambda share: share >= MIN_PART_SHARE))
    def host_share(self, share):
        return share_finding("host", share)

    def graphs_on(self) -> bool:
        return any(isinstance(f, Server) and f.get("cuda_graphs") is True for f in self.facts.values())

    def platform_is_cpu(self) -> bool:
        """The case's platform is a CPU: there are no CUDA graphs to turn on, so graphs off is no fault there."""
        return any(isinstance(f, Platform) and on_cpu(f.get("device_api")) for f in self.facts.values())
