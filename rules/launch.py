"""Idle GPU between ready kernels: launches, graphs that do not replay, host work between steps.

A graph removes only the launch share it replaces; it cannot remove host work, syncs or
waiting for another rank. So launch rules claim the launch part and nothing more, and host
rules claim the host part.
"""

from diagnoser.engine import (
    MATCH,
    TEST,
    Budget,
    Finding,
    Graph,
    Host,
    Layout,
    RuleSet,
    Server,
    ev,
    load_specs,
    rule,
)

SPECS = load_specs(__file__)

# A part worth a hypothesis: at least 8 % of the step and 0.1 ms (below that, timer noise).
MIN_PART_SHARE = 0.08
MIN_PART_MS = 0.1


def notable(part_ms: float, step_ms: float) -> bool:
    return part_ms >= MIN_PART_MS and part_ms >= MIN_PART_SHARE * step_ms


# GIL busy above 80 % means the step loop queues for it most of the time.
GIL_BUSY = 0.8
# The scheduler owns the host part when it takes at least 30 % of it.
SCHEDULER_SHARE = 0.3


class LaunchRules(RuleSet):
    @rule(SPECS["launch-gaps"], Budget(launch_ms=MATCH.launch, step_ms=MATCH.step), TEST(lambda launch, step: notable(launch, step)))
    def launch_gaps(self, launch, step):
        return Finding(evidence=[ev("budget.launch_ms", launch, "ms"), ev("budget.step_ms", step, "ms")], removable_ms=launch)

    @rule(SPECS["graphs-off"], Server(cuda_graphs=False))
    def graphs_off_by_flag(self, parent_cap_ms):
        return Finding(evidence=[ev("server.cuda_graphs", False)], removable_ms=parent_cap_ms)

    @rule(SPECS["graphs-off"], Graph(status="none"))
    def graphs_off_in_trace(self, parent_cap_ms):
        return Finding(evidence=[ev("graph.status", "none")], removable_ms=parent_cap_ms)

    @rule(
        SPECS["graph-capture-too-small"],
        Graph(live_batch_size=MATCH.live, max_captured_batch=MATCH.largest),
        TEST(lambda live, largest: live > largest),
    )
    def graph_capture_too_small(self, live, largest, parent_cap_ms):
        return Finding(
            evidence=[ev("graph.live_batch_size", live), ev("graph.max_captured_batch", largest)],
            removable_ms=parent_cap_ms,
        )

    @rule(
        SPECS["graph-capture-too-small"],
        Server(cuda_graphs=True, cuda_graph_max_batch=MATCH.largest),
        Layout(batch=MATCH.live, dp=MATCH.dp),
        TEST(lambda live, dp, largest: live // dp > largest),
    )
    def graph_capture_below_batch(self, live, dp, largest, parent_cap_ms):
        return Finding(
            evidence=[ev("workload.batch_per_dp_rank", live // dp), ev("server.cuda_graph_max_batch", largest)],
            removable_ms=parent_cap_ms,
        )

    @rule(SPECS["graph-partial"], Graph(status="partial"))
    def graph_partial(self, parent_cap_ms):
        return Finding(evidence=[ev("graph.status", "partial")], removable_ms=parent_cap_ms)

    @rule(SPECS["host-overhead"], Budget(host_ms=MATCH.host, step_ms=MATCH.step), TEST(lambda host, step: notable(host, step)))
    def host_overhead(self, host, step):
        return Finding(evidence=[ev("budget.host_ms", host, "ms"), ev("budget.step_ms", step, "ms")], removable_ms=host)

    @rule(SPECS["gil-contention"], Host(python_gil_busy_fraction=MATCH.busy), TEST(lambda busy: busy >= GIL_BUSY))
    def gil_contention(self, busy, parent_cap_ms):
        return Finding(evidence=[ev("host.python_gil_busy_fraction", busy)], removable_ms=parent_cap_ms)

    @rule(SPECS["scheduler-overhead"], Host(scheduler_ms=MATCH.sched))
    def scheduler_overhead(self, sched, parent_cap_ms):
        if parent_cap_ms is None or sched < SCHEDULER_SHARE * parent_cap_ms:
            return None
        return Finding(evidence=[ev("host.scheduler_ms", sched, "ms")], removable_ms=sched)
