"""Exposed communication: a slow transfer or a late participant.

A collective's interval on one rank includes the time it waited for the slowest rank, so a
long interval is first a question of arrival skew; only the time after the last arrival is
transfer cost that a faster link or algorithm could cut.
"""

from diagnoser.engine import (
    MATCH,
    TEST,
    Budget,
    Collective,
    Finding,
    Probe,
    RuleSet,
    Server,
    ev,
    load_specs,
    rule,
)

SPECS = load_specs(__file__)

# Exposed communication above a tenth of the step is worth its own hypothesis.
COMM_SHARE = 0.1
# Waiting dominates when it is over 40 % of the collective's interval.
WAIT_SHARE = 0.4
# Transfer dominates when it is over half of the interval.
TRANSFER_SHARE = 0.5


class CollectiveRules(RuleSet):
    @rule(
        SPECS["exposed-comm"],
        Budget(exposed_comm_ms=MATCH.comm, step_ms=MATCH.step),
        TEST(lambda comm, step: comm >= COMM_SHARE * step and comm >= 0.1),
    )
    def exposed_comm(self, comm, step):
        return Finding(evidence=[ev("budget.exposed_comm_ms", comm, "ms"), ev("budget.step_ms", step, "ms")], removable_ms=comm)

    @rule(
        SPECS["late-rank"],
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
        SPECS["slow-transfer"],
        Collective(op=MATCH.op, interval_ms=MATCH.interval, transfer_ms=MATCH.transfer),
        TEST(lambda transfer, interval: interval > 0 and transfer >= TRANSFER_SHARE * interval),
    )
    def slow_transfer(self, op, interval, transfer):
        return Finding(
            evidence=[ev(f"collectives[{op}].interval_ms", interval, "ms"), ev(f"collectives[{op}].transfer_ms", transfer, "ms")],
            removable_ms=transfer,
            key=op,
        )

    @rule(SPECS["custom-allreduce-off"], Server(custom_allreduce=False))
    def custom_allreduce_off(self, parent_cap_ms):
        return Finding(evidence=[ev("server.custom_allreduce", False)], removable_ms=parent_cap_ms)

    @rule(SPECS["pcie-topology"], Server(interconnect="pcie"))
    def pcie_by_setting(self, parent_cap_ms):
        return Finding(evidence=[ev("server.interconnect", "pcie")], removable_ms=parent_cap_ms)

    @rule(SPECS["pcie-topology"], Probe(nvlink_active_links=0))
    def pcie_by_probe(self, parent_cap_ms):
        return Finding(evidence=[ev("probe.nvlink_active_links", 0)], removable_ms=parent_cap_ms)
