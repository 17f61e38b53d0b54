"""Exposed communication: a slow transfer or a late participant.

A collective's interval on one rank includes the time it waited for the slowest rank, so a
long interval is first a question of arrival skew; only the time after the last arrival is
transfer cost that a faster link or algorithm could cut.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    NOT,
    TEST,
    W,
    Budget,
    Collective,
    Expectation,
    Finding,
    Grade,
    Layout,
    Shares,
    Probe,
    Reference,
    RuleSet,
    RunDiff,
    Server,
    ev,
    load_specs,
    rule,
)

from diagnoser.rules.comparison import (
    OTHER_WAY, SPREAD_SETTINGS, ablation, ablation_finding, idle_through_the_delta, slower_beyond_noise,
)
from diagnoser.rules.launch import device_read_idle, share_finding

SPECS = load_specs(__file__)

# References taken on the same machine under other software: whatever links its devices linked them there too.
LINK_ON_BOTH_SIDES = frozenset({"older_version", "earlier_in_run", "other_engine"})

# Exposed communication above a tenth of the step is worth its own hypothesis.
COMM_SHARE = 0.1
# ... and above 0.1 ms: below that a collective's time is within the profiler's resolution.
MIN_COMM_MS = 0.1
# Waiting dominates when it is over 40 % of the collective's interval.
WAIT_SHARE = 0.4
# Transfer dominates when it is over half of the interval.
TRANSFER_SHARE = 0.5
# A collective moving at least twice the bytes its ranks need spends over half its transfer on
# bytes nobody reads (padding to the largest shard, a full gather where a slice is needed); below
# 2x, protocol headers and alignment explain the difference.
EXCESS_VOLUME = 2.0


def excess_ms(c, moved: float, needed: float) -> float | None:
    """Transfer time spent on bytes nobody needs: the interval (less any wait for a late rank,
    which fewer bytes do not shorten) times the excess fraction of the volume."""
    if "interval_ms" not in c:
        return None
    moving = max(0.0, c["interval_ms"] - c.get("wait_ms", 0.0))
    return moving * (1 - needed / moved)


def spread_over_unlike(d, slower: str, faster: str) -> bool:
    """Unlike devices added: their slower reads, taken in turn, explain the delta without communication
    (pipeline-stages-serialize reads it)."""
    return d["setting"] == "devices" and OTHER_WAY["devices"](slower, faster)


class CollectiveRules(RuleSet):
    @rule(SPECS["exposed-comm"], Shares(exposed_comm=MATCH.share), TEST(lambda share: share >= COMM_SHARE))
    def exposed_share(self, share):
        return share_finding("exposed_comm", share)

    @rule(SPECS["exposed-comm"], *ablation(*SPREAD_SETTINGS), NOT(Probe(device_utilization=W())),
          TEST(lambda d, slower, faster: not spread_over_unlike(d, slower, faster)))
    def spread_wider_slower(self, d):
        """One copy of the model over more devices (more TP ranks, more devices however split, or each layer's matmuls
        split instead of whole layers): each device reads a smaller part of the bytes, or the same bytes in parallel,
        so a slower token is paid in what passes between them (per-layer collectives, activations handed on, waits
        for the slowest device)."""
        return ablation_finding(d)

    @rule(SPECS["exposed-comm"], AS.d << RunDiff(setting="interconnect", slowdown=MATCH.slowdown),
          TEST(lambda d, slowdown: slower_beyond_noise(d, slowdown)))
    def slower_link(self, d):
        """The same devices, split the same way, doing the same work over another link or collective transport (TCP
        against RDMA, PCIe against NVLink, peer-to-peer off): nothing but what passes between the devices differs, so
        the delta is what the slower link costs. The located change stays beside it: a transport is a library as well
        as a wire, and its own host work (a synchronisation per operation) moves with it."""
        return ablation_finding(d)

    @rule(
        SPECS["exposed-comm"],
        *ablation(*SPREAD_SETTINGS),
        Probe(device_utilization=MATCH.busy),
        TEST(lambda d, busy, slower, faster: not idle_through_the_delta(d, busy) and not spread_over_unlike(d, slower, faster)),
    )
    def spread_wider_slower_while_busy(self, d, busy):
        """As above, with the device busy for longer than the faster run took: the added time can be the devices'.
        (Idle through the delta, it was spent where they do not see it: cpu-offload's.)"""
        return ablation_finding(d)

    @rule(
        SPECS["exposed-comm"],
        AS.b << Budget(most_exposed_comm_ms=MATCH.comm, step_ms=MATCH.step),
        TEST(lambda comm, step: comm >= COMM_SHARE * step and comm >= MIN_COMM_MS),
    )
    def exposed_comm(self, b, comm, step):
        """The step's exposed communication on the rank that spent the most in it: where one rank is late, the
        others wait out its lateness at the collective, and their wait is the step's (every rank's step ends at
        the same collective)."""
        if comm == b.get("exposed_comm_ms"):
            return Finding(evidence=[ev("budget.exposed_comm_ms", comm, "ms"), ev("budget.step_ms", step, "ms")], removable_ms=comm)
        rank = b.get("most_exposed_rank")
        return Finding(
            evidence=[ev("budget.most_exposed_comm_ms", comm, "ms"), ev("budget.most_exposed_rank", rank), ev("budget.step_ms", step, "ms")],
            removable_ms=comm,
            detail=f"Rank {rank} spends it; the budgeted (critical) rank computes meanwhile.",
        )

    @rule(
        SPECS["exposed-comm"],
        Collective(op=MATCH.op, interval_ms=MATCH.interval, calls_per_step=MATCH.calls),
        NOT(Budget(exposed_comm_ms=W())),
        NOT(Reference(step_ms=W())),
        TEST(lambda interval, calls: interval * calls >= MIN_COMM_MS),
    )
    def collectives_per_step(self, op, interval, calls):
        """A decode step's tensor-parallel collectives sit between the layers that need their result, so their
        time per step is on the critical path unless something overlaps it; with no step to hold it against and
        no budget of its exposed part, it is indicated."""
        return Finding(
            evidence=[ev(f"collectives[{op}].calls_per_step", calls), ev(f"collectives[{op}].interval_ms", interval, "ms")],
            key=op,
            detail=f"{calls:g} {op} calls of {interval:.3g} ms each: {interval * calls:.3g} ms of every step.",
        )

    @rule(
        SPECS["exposed-comm"],
        Collective(op=MATCH.op, interval_ms=MATCH.interval, calls_per_step=MATCH.calls),
        NOT(Budget(exposed_comm_ms=W())),
        Reference(step_ms=MATCH.step),
        TEST(lambda interval, calls, step: interval * calls >= MIN_COMM_MS and interval * calls >= COMM_SHARE * step),
    )
    def collectives_share_of_step(self, op, interval, calls, step):
        """The collectives' time per step against the step: a tenth or more of it, and the budget that would say
        how much is exposed is missing, so it is indicated."""
        return Finding(
            evidence=[ev(f"collectives[{op}].calls_per_step", calls), ev(f"collectives[{op}].interval_ms", interval, "ms"),
                      ev("reference.step_ms", step, "ms")],
            key=op,
            detail=f"{calls:g} {op} calls of {interval:.3g} ms each take {interval * calls / step:.0%} of the {step:.4g} ms step.",
        )

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

    @rule(
        SPECS["collective-excess-volume"],
        AS.c << Collective(op=MATCH.op, message_bytes=MATCH.moved, bytes_needed=MATCH.needed),
        TEST(lambda moved, needed: moved > 0 and moved >= EXCESS_VOLUME * needed),
    )
    def collective_excess_volume(self, c, op, moved, needed):
        evidence = [ev(f"collectives[{op}].message_bytes", moved, "B"), ev(f"collectives[{op}].bytes_needed", needed, "B")]
        evidence += [ev(f"collectives[{op}].{n}", c[n], "ms") for n in ("interval_ms", "wait_ms") if n in c]
        return Finding(
            evidence=evidence,
            removable_ms=excess_ms(c, moved, needed),
            key=op,
            detail=f"{op} moves {moved / 1e6:.3g} MB where its ranks need {needed / 1e6:.3g} MB ({1 - needed / moved:.0%} excess).",
        )

    @rule(SPECS["collective-not-fused"], AS.c << Collective(op=MATCH.op, fused_with_compute=False))
    def collective_not_fused(self, c, op, parent_cap_ms):
        """Its measured interval is the most overlap can hide (the parent caps it at the exposed part)."""
        evidence = [ev(f"collectives[{op}].fused_with_compute", False)]
        if "interval_ms" in c:
            evidence.append(ev(f"collectives[{op}].interval_ms", c["interval_ms"], "ms"))
        return Finding(evidence=evidence, removable_ms=c.get("interval_ms", parent_cap_ms), key=op)

    @rule(SPECS["pipeline-stages-serialize"], *ablation("devices", other_way=True))
    def unlike_devices_added_slower(self, d):
        """Devices of another kind added to the model's spread made a token slower: split by the memory each has,
        the added devices hold a share of the bytes and read it at their own, lower bandwidth while the others wait
        for the token to pass (a split by layers, the usual one over unlike devices). That alone slows a token with
        no communication at all: the delta is what the slower devices' turn costs, hand-offs included."""
        return ablation_finding(d)

    @rule(SPECS["pipeline-stages-serialize"], *ablation("split_mode", other_way=True))
    def layer_split_slower(self, d):
        """The same devices, the model split by whole layers against every layer split over them: a token passes the
        layer split's devices in turn, each reading its part while the others wait, where the tensor split has them
        all read at once. The delta is what taking turns cost (less the tensor split's collectives)."""
        return ablation_finding(d)

    @rule(
        SPECS["pipeline-stages-serialize"],
        Layout(pp=MATCH.pp, batch=MATCH.batch),
        NOT(device_read_idle()),
        TEST(lambda pp, batch: pp > 1 and batch < pp),
    )
    def pipeline_stages_serialize(self, pp, batch):
        """A stage can only work on a sequence no other stage holds: with fewer sequences than stages,
        at most ``batch`` of the ``pp`` stages are busy at once. Each still runs its own layers for every token,
        about batch / pp of the step: a device read idle (IDLE_DEVICE) ran none of them, so its stage's work went
        elsewhere, and taking turns is not what slowed it."""
        return Finding(
            evidence=[ev("workload.layout.pp", pp), ev("workload.batch", batch)],
            detail=(
                f"{batch} sequence(s) cannot fill {pp} stages: each stage waits for the one before it, "
                f"so each GPU is busy about {batch / pp:.0%} of the step."
            ),
        )

    @rule(
        SPECS["pipeline-stages-serialize"],
        AS.layout << Layout(pp=MATCH.pp),
        Expectation(kind=MATCH.kind),
        TEST(lambda pp: pp > 1),
    )
    def pipeline_token_latency(self, layout, pp, kind):
        """Whatever the batch, each token passes the stages in turn: pipelining overlaps different
        sequences, never one token's layers, so a token's step is the whole model's plus the hops.
        That is slow only against a figure that expected more (another layout, a spreadsheet that
        counted every GPU working on each token); a batch smaller than the stages says more (idle
        stages), in the rule above."""
        if layout.get("batch", pp) < pp:
            return None
        return Finding(
            evidence=[ev("workload.layout.pp", pp), ev("expected.kind", kind)],
            detail=(
                f"Each token passes all {pp} stages one after another, so its step is the whole model's time on one "
                "GPU plus the hand-offs; pipelining adds throughput across sequences, never per-token speed, "
                f"where tensor parallelism over the same GPUs splits every layer. The expected figure ({kind}) is "
                "worth checking for a layout that had every GPU working on each token."
            ),
        )

    @rule(SPECS["custom-allreduce-off"], *ablation("custom_allreduce"), alone=True)
    def custom_allreduce_measured(self, d):
        """The same load with the engine's custom all-reduce and with plain NCCL: the delta is what it saves,
        whatever a budget says of the exposed communication."""
        return ablation_finding(d, ev("server.custom_allreduce", False))

    @rule(SPECS["custom-allreduce-off"], Server(custom_allreduce=False), NOT(Layout(tp=1)), NOT(Probe(peer_access=False)))
    def custom_allreduce_off(self, parent_cap_ms):
        return Finding(evidence=[ev("server.custom_allreduce", False)], removable_ms=parent_cap_ms)

    @rule(SPECS["custom-allreduce-off"], Server(custom_allreduce=False), NOT(Layout(tp=1)), Probe(peer_access=False))
    def custom_allreduce_without_peers(self, parent_cap_ms):
        """The kernel cannot run where the GPUs have no peer access: it is off because of the link."""
        evidence = [ev("server.custom_allreduce", False), ev("probe.peer_access", False)]
        return Finding(evidence=evidence, removable_ms=parent_cap_ms, consequence=True)

    @rule(SPECS["pcie-topology"], Server(link="pcie"), NOT(Layout(tp=1, ep=1, pp=1)))
    def pcie_by_setting(self, parent_cap_ms):
        return self.link_finding(ev("server.link", "pcie"), parent_cap_ms)

    @rule(SPECS["exposed-comm"], Server(link="network"), AS.layout << Layout(),
          TEST(lambda layout: max(layout.get("tp", 1), layout.get("ep", 1)) > 1))
    def layers_split_over_a_network(self, parent_cap_ms):
        """Tensor- or expert-parallel ranks on different machines: every layer's all-reduce (or dispatch and combine)
        crosses the network, two or more a layer, each tens of microseconds at best where NVLink takes a few; over a
        model's layers that is milliseconds a token, a large share of a decode step. (Pipeline stages hand on one
        activation per stage, which a network carries cheaply.) A trace's collective intervals measure it."""
        return self.link_finding(ev("server.link", "network"), parent_cap_ms)

    @rule(SPECS["pcie-topology"], Probe(nvlink_active_links=0), NOT(Layout(tp=1, ep=1, pp=1)))
    def pcie_by_probe(self, parent_cap_ms):
        return self.link_finding(ev("probe.nvlink_active_links", 0), parent_cap_ms)

    @rule(SPECS["pcie-topology"], Probe(peer_access=False), NOT(Layout(tp=1, ep=1, pp=1)))
    def no_peer_access(self, parent_cap_ms):
        """Without peer access every transfer between the GPUs stages through host memory, whatever the link."""
        return self.link_finding(ev("probe.peer_access", False), parent_cap_ms)

    def link_finding(self, link, parent_cap_ms: float | None) -> Finding:
        """Against the same machine under other software (an earlier release, another engine) the link was on both
        sides: with nothing measuring what it cost this run, it is only possible there, behind what differs."""
        if parent_cap_ms is None and any(isinstance(f, Expectation) and f.get("kind") in LINK_ON_BOTH_SIDES
                                         for f in self.facts.values()):
            return Finding(evidence=[link], grade=Grade.possible)
        return Finding(evidence=[link], removable_ms=parent_cap_ms)
