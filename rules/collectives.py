"""Exposed communication: a slow transfer or a late participant.

A collective's interval on one rank includes the time it waited for the slowest rank, so a
long interval is first a question of arrival skew; only the time after the last arrival is
transfer cost that a faster link or algorithm could cut.
"""

from diagnoser.engine import (
    MATCH,
    TEST,
    Budget,
    Check,
    Collective,
    Finding,
    Probe,
    RemedySpec,
    RuleSet,
    RuleSpec,
    Server,
    ev,
    rule,
    undo,
)

# Exposed communication above a tenth of the step is worth its own hypothesis.
COMM_SHARE = 0.1
# Waiting dominates when it is over 40 % of the collective's interval.
WAIT_SHARE = 0.4
# Transfer dominates when it is over half of the interval.
TRANSFER_SHARE = 0.5

COMM_UNDO = (
    undo("per_user_latency", "the step on the critical rank does not get shorter"),
    undo("useful_throughput", "aggregate tokens/s at the served concurrency falls"),
    undo("memory_kv_capacity", "the new layout leaves less memory per rank for KV cache"),
)

EXPOSED_COMM = RuleSpec(
    id="exposed-comm",
    title="Long collective intervals on the critical path",
    requires=("budget",),
    explanation="Communication that compute does not hide takes a large share of the step: transfer cost or a late participant.",
    check=Check(
        measure="aligned per-rank timelines of the same steps: arrival time of each rank at each collective and the compute before it",
        confirms="the interval is mostly time after the last arrival (transfer) or one rank consistently arrives last (skew)",
        refutes="ranks arrive together and the transfer takes what the message size over link bandwidth predicts",
    ),
    remedies=(RemedySpec(action="overlap communication with compute, or pick a layout with less exposed traffic", cost="engine or layout change", risk="memory per rank and latency shift", share=0.5),),
    undo=COMM_UNDO,
)

LATE_RANK = RuleSpec(
    id="late-rank",
    title="A late participant holds every rank at the collective",
    parent="exposed-comm",
    requires=("collectives",),
    explanation="Most of the collective's interval is spent waiting for one rank, whose preceding compute is longer.",
    check=Check(
        measure="the late rank's compute before the collective vs. the others' (expert load, sequence lengths, clocks)",
        confirms="the same rank is late step after step and its preceding work is larger",
        refutes="lateness moves between ranks randomly (jitter, not imbalance)",
    ),
    remedies=(RemedySpec(action="balance the work before the collective (expert placement, sequence assignment)", cost="layout or scheduler change", risk="imbalance returns with other traffic"),),
    undo=COMM_UNDO,
)

SLOW_TRANSFER = RuleSpec(
    id="slow-transfer",
    title="The transfer itself is slow",
    parent="exposed-comm",
    requires=("collectives",),
    explanation="After the last rank arrives, the collective still takes most of its interval: link bandwidth, algorithm or message size.",
    check=Check(
        measure="message bytes / transfer time against the link's measured bandwidth (nccl-tests on the same GPUs)",
        confirms="effective bandwidth well under what nccl-tests reaches at this message size",
        refutes="effective bandwidth matches nccl-tests (the traffic itself must shrink)",
    ),
    remedies=(RemedySpec(action="use the engine's custom/one-shot all-reduce for small messages", cost="configuration", risk="supported topologies only"),),
    undo=COMM_UNDO,
)

CUSTOM_ALLREDUCE_OFF = RuleSpec(
    id="custom-allreduce-off",
    title="Custom all-reduce is disabled",
    parent="exposed-comm",
    requires=("server",),
    explanation="Small decode all-reduces go through generic NCCL rings instead of the low-latency in-node kernel.",
    check=Check(
        measure="all-reduce time per step with custom all-reduce enabled, same layout",
        confirms="the all-reduce interval falls",
        refutes="the interval stays (NCCL already picks a low-latency algorithm here)",
    ),
    remedies=(RemedySpec(action="re-enable custom all-reduce (drop the disable flag) on an NVLink/P2P-capable node", cost="configuration", risk="needs P2P support"),),
    undo=COMM_UNDO,
)

PCIE_TOPOLOGY = RuleSpec(
    id="pcie-topology",
    title="Collectives cross PCIe, not NVLink",
    parent="exposed-comm",
    requires=("server",),
    explanation="Tensor-parallel all-reduces over PCIe pay far more latency and less bandwidth than over NVLink.",
    check=Check(
        measure="nvidia-smi topo -m and the collective's effective bandwidth",
        confirms="PCIe (PIX/PHB/SYS) between the ranks and bandwidth near PCIe rates",
        refutes="NVLink between the ranks",
    ),
    remedies=(RemedySpec(action="use a layout with fewer cross-GPU collectives per step (lower TP, or pipeline across PCIe)", cost="layout change", risk="memory per rank and latency shift", share=0.5),),
    undo=COMM_UNDO,
)


class CollectiveRules(RuleSet):
    @rule(
        EXPOSED_COMM,
        Budget(exposed_comm_ms=MATCH.comm, step_ms=MATCH.step),
        TEST(lambda comm, step: comm >= COMM_SHARE * step and comm >= 0.1),
    )
    def exposed_comm(self, comm, step):
        return Finding(evidence=[ev("budget.exposed_comm_ms", comm, "ms"), ev("budget.step_ms", step, "ms")], removable_ms=comm)

    @rule(
        LATE_RANK,
        Collective(op=MATCH.op, interval_ms=MATCH.interval, wait_ms=MATCH.wait, late_rank=MATCH.late),
        TEST(lambda wait, interval: interval > 0 and wait >= WAIT_SHARE * interval),
    )
    def late_rank(self, op, interval, wait, late):
        return Finding(
            evidence=[ev(f"collectives[{op}].interval_ms", interval, "ms"), ev(f"collectives[{op}].wait_ms", wait, "ms"), ev(f"collectives[{op}].late_rank", late)],
            removable_ms=wait,
            key=op,
            detail=f"Rank {late} arrives last at {op}.",
        )

    @rule(
        SLOW_TRANSFER,
        Collective(op=MATCH.op, interval_ms=MATCH.interval, transfer_ms=MATCH.transfer),
        TEST(lambda transfer, interval: interval > 0 and transfer >= TRANSFER_SHARE * interval),
    )
    def slow_transfer(self, op, interval, transfer):
        return Finding(
            evidence=[ev(f"collectives[{op}].interval_ms", interval, "ms"), ev(f"collectives[{op}].transfer_ms", transfer, "ms")],
            removable_ms=transfer,
            key=op,
        )

    @rule(CUSTOM_ALLREDUCE_OFF, Server(custom_allreduce=False))
    def custom_allreduce_off(self, parent_cap_ms):
        return Finding(evidence=[ev("server.custom_allreduce", False)], removable_ms=parent_cap_ms)

    @rule(PCIE_TOPOLOGY, Server(interconnect="pcie"))
    def pcie_by_setting(self, parent_cap_ms):
        return Finding(evidence=[ev("server.interconnect", "pcie")], removable_ms=parent_cap_ms)

    @rule(PCIE_TOPOLOGY, Probe(nvlink_active_links=0))
    def pcie_by_probe(self, parent_cap_ms):
        return Finding(evidence=[ev("probe.nvlink_active_links", 0)], removable_ms=parent_cap_ms)
