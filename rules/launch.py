"""Idle GPU between ready kernels: launches, graphs that do not replay, host work between steps.

A graph removes only the launch share it replaces; it cannot remove host work, syncs or
waiting for another rank. So launch rules claim the launch part and nothing more, and host
rules claim the host part.
"""

from diagnoser.engine import (
    MATCH,
    TEST,
    Budget,
    Check,
    Finding,
    Graph,
    Host,
    Layout,
    RemedySpec,
    RuleSet,
    RuleSpec,
    Server,
    ev,
    rule,
    undo,
)

# A part worth a hypothesis: at least 8 % of the step and 0.1 ms (below that, timer noise).
MIN_PART_SHARE = 0.08
MIN_PART_MS = 0.1


def notable(part_ms: float, step_ms: float) -> bool:
    return part_ms >= MIN_PART_MS and part_ms >= MIN_PART_SHARE * step_ms


GRAPH_UNDO = (
    undo("memory_kv_capacity", "graph pools cut the KV cache so far that fewer sequences fit"),
    undo("p99_itl", "p99 inter-token latency rises (graph recapture, padding to capture sizes)"),
    undo("per_user_latency", "the median step does not fall by the launch share"),
)

LAUNCH_GAPS = RuleSpec(
    id="launch-gaps",
    title="Gaps before ready kernels: launch dependencies on the critical path",
    requires=("budget",),
    explanation="The GPU idles while the host issues the next kernel; the step is partly paced by launch cost.",
    check=Check(
        measure="CPU/GPU timeline of the same steps (nsys) and a supported graph-replay comparison at the live batch",
        confirms="gaps line up with host launch calls, and graph replay at the same shapes removes them",
        refutes="the gaps are waits on a dependency (sync, another rank, data) that replay leaves in place",
    ),
    remedies=(
        RemedySpec(action="replay the decode step as a CUDA graph for the live batch sizes", cost="configuration; graph memory", risk="capture-time shapes only; memory for graph pools"),
        RemedySpec(action="fuse small kernels (fewer launches per step)", cost="kernel work", risk="numerics of fused ops", share=0.5),
    ),
    undo=GRAPH_UNDO,
)

GRAPHS_OFF = RuleSpec(
    id="graphs-off",
    title="CUDA graphs are off",
    parent="launch-gaps",
    explanation="Every kernel of the step is launched from the host, so the launch gaps are paid on every step.",
    check=Check(
        measure="the same workload with graphs enabled (e.g. without enforce-eager), same batch and context",
        confirms="the launch part of the step shrinks and the step falls by about that much",
        refutes="the step time stays the same (the gaps are not launch-bound)",
    ),
    remedies=(RemedySpec(action="enable CUDA graph capture for decode", cost="configuration; capture time at start-up", risk="graph memory reduces KV capacity"),),
    undo=GRAPH_UNDO,
)

GRAPH_CAPTURE_TOO_SMALL = RuleSpec(
    id="graph-capture-too-small",
    title="Graphs are captured, but not for the live batch size",
    parent="launch-gaps",
    requires=("graph",),
    explanation="The live batch is larger than every captured size, so decode falls back to eager launches.",
    check=Check(
        measure="graph launches per step at the live batch (nsys: cudaGraphLaunch vs. kernel launches)",
        confirms="no graph launch at the live batch size, graph launches at smaller batches",
        refutes="graph launches appear at the live batch size",
    ),
    remedies=(RemedySpec(action="raise the largest capture size to cover the live batch (e.g. max capture batch size)", cost="configuration", risk="more graph memory, longer start-up"),),
    undo=GRAPH_UNDO,
)

GRAPH_PARTIAL = RuleSpec(
    id="graph-partial",
    title="Graph replay covers only part of the step",
    parent="launch-gaps",
    requires=("graph",),
    explanation="Piecewise capture leaves some ops (often attention or sampling) launched eagerly between graph pieces.",
    check=Check(
        measure="which kernels run outside graph launches in the trace, and their launch gaps",
        confirms="the remaining gaps sit next to the eager kernels",
        refutes="the gaps sit inside graph-replayed regions",
    ),
    remedies=(RemedySpec(action="use full-graph capture for decode if the attention backend supports it", cost="configuration", risk="backend support; graph memory", share=0.7),),
    undo=GRAPH_UNDO,
)

HOST_OVERHEAD = RuleSpec(
    id="host-overhead",
    title="Host, scheduler or GIL work between steps is on the critical path",
    requires=("budget",),
    explanation="The GPU waits for the host to schedule, prepare inputs or process outputs before the next step.",
    check=Check(
        measure="host timeline (nsys CPU sampling or py-spy) of the gaps between steps",
        confirms="the gaps are spent in the scheduler, input preparation or Python output handling",
        refutes="the host is idle during the gaps (the wait is elsewhere)",
    ),
    remedies=(
        RemedySpec(action="overlap scheduling with the running step (async scheduling / output processing)", cost="engine flag or upgrade", risk="engine support; ordering bugs"),
        RemedySpec(action="move per-token Python work off the critical path", cost="code change", risk="low", share=0.5),
    ),
    undo=(undo("per_user_latency", "median inter-token latency is not lower"), undo("useful_throughput", "tokens/s at the served concurrency falls")),
)

GIL_CONTENTION = RuleSpec(
    id="gil-contention",
    title="Python threads contend for the GIL in the serving process",
    parent="host-overhead",
    requires=("host",),
    explanation="The serving process's Python is busy nearly all the time, so step preparation queues behind other Python work.",
    check=Check(
        measure="py-spy --gil (or nsys Python sampling) during decode",
        confirms="the step loop waits on the GIL held by tokenization, HTTP or metrics threads",
        refutes="the GIL is mostly free during the gaps",
    ),
    remedies=(RemedySpec(action="move tokenization/HTTP handling to another process (API server separate from the engine core)", cost="deployment change", risk="low"),),
    undo=HOST_OVERHEAD.undo,
)

SCHEDULER_OVERHEAD = RuleSpec(
    id="scheduler-overhead",
    title="The scheduler's per-step work is a large share of the host time",
    parent="host-overhead",
    requires=("host",),
    explanation="Building the batch, block tables and metadata every step costs more than the launches it precedes.",
    check=Check(
        measure="time in the scheduler per step vs. number of running sequences",
        confirms="scheduler time grows with running sequences and matches the gap",
        refutes="scheduler time is small next to the gap",
    ),
    remedies=(RemedySpec(action="enable multi-step or async scheduling", cost="engine flag", risk="changes streaming granularity"),),
    undo=HOST_OVERHEAD.undo,
)

# GIL busy above 80 % means the step loop queues for it most of the time.
GIL_BUSY = 0.8
# The scheduler owns the host part when it takes at least 30 % of it.
SCHEDULER_SHARE = 0.3


class LaunchRules(RuleSet):
    @rule(LAUNCH_GAPS, Budget(launch_ms=MATCH.launch, step_ms=MATCH.step), TEST(lambda launch, step: notable(launch, step)))
    def launch_gaps(self, launch, step):
        return Finding(evidence=[ev("budget.launch_ms", launch, "ms"), ev("budget.step_ms", step, "ms")], removable_ms=launch)

    @rule(GRAPHS_OFF, Server(cuda_graphs=False))
    def graphs_off_by_flag(self, parent_cap_ms):
        return Finding(evidence=[ev("server.cuda_graphs", False)], removable_ms=parent_cap_ms)

    @rule(GRAPHS_OFF, Graph(status="none"))
    def graphs_off_in_trace(self, parent_cap_ms):
        return Finding(evidence=[ev("graph.status", "none")], removable_ms=parent_cap_ms)

    @rule(
        GRAPH_CAPTURE_TOO_SMALL,
        Graph(live_batch_size=MATCH.live, max_captured_batch=MATCH.largest),
        TEST(lambda live, largest: live > largest),
    )
    def graph_capture_too_small(self, live, largest, parent_cap_ms):
        return Finding(
            evidence=[ev("graph.live_batch_size", live), ev("graph.max_captured_batch", largest)],
            removable_ms=parent_cap_ms,
        )

    @rule(
        GRAPH_CAPTURE_TOO_SMALL,
        Server(cuda_graphs=True, cuda_graph_max_batch=MATCH.largest),
        Layout(batch=MATCH.live, dp=MATCH.dp),
        TEST(lambda live, dp, largest: live // dp > largest),
    )
    def graph_capture_below_batch(self, live, dp, largest, parent_cap_ms):
        return Finding(
            evidence=[ev("workload.batch_per_dp_rank", live // dp), ev("server.cuda_graph_max_batch", largest)],
            removable_ms=parent_cap_ms,
        )

    @rule(GRAPH_PARTIAL, Graph(status="partial"))
    def graph_partial(self, parent_cap_ms):
        return Finding(evidence=[ev("graph.status", "partial")], removable_ms=parent_cap_ms)

    @rule(HOST_OVERHEAD, Budget(host_ms=MATCH.host, step_ms=MATCH.step), TEST(lambda host, step: notable(host, step)))
    def host_overhead(self, host, step):
        return Finding(evidence=[ev("budget.host_ms", host, "ms"), ev("budget.step_ms", step, "ms")], removable_ms=host)

    @rule(GIL_CONTENTION, Host(python_gil_busy_fraction=MATCH.busy), TEST(lambda busy: busy >= GIL_BUSY))
    def gil_contention(self, busy, parent_cap_ms):
        return Finding(evidence=[ev("host.python_gil_busy_fraction", busy)], removable_ms=parent_cap_ms)

    @rule(SCHEDULER_OVERHEAD, Host(scheduler_ms=MATCH.sched))
    def scheduler_overhead(self, sched, parent_cap_ms):
        if parent_cap_ms is None or sched < SCHEDULER_SHARE * parent_cap_ms:
            return None
        return Finding(evidence=[ev("host.scheduler_ms", sched, "ms")], removable_ms=sched)
