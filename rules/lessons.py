"""Follow-up questions a case raises, answered where the answer is "measure, don't assume".

A lesson fires when its situation holds (its cause concluded) or when the case records the
belief it corrects (``claims``). It adds no gain; it keeps a fix from being oversold.
"""

from diagnoser.engine import (
    MATCH,
    OR,
    TEST,
    Bound,
    Budget,
    Claim,
    Finding,
    Holds,
    Kind,
    RuleSet,
    RuleSpec,
    ev,
    note,
    rule,
)

# Below half of the ceiling people start asking whether this is "normal".
LOW_FRACTION = 0.5


def _lesson(*texts: str) -> RuleSpec:
    return note(Kind.lesson, *texts)


LOW_FRACTION_LESSON = _lesson(
    "low-fraction-not-a-diagnosis",
    "A low fraction of the bound is not a diagnosis, and no fraction is 'normal'",
    "The fraction says how much is unexplained, not why; there is no universal normal value to compare it with.",
    "verify the bound's scope (per-rank bytes, measured bandwidth, same boundary) and attribute the step with a trace",
    "a named part of the budget holds the missing time",
    "the corrected bound lands near the observed step",
)
TP_CALLS = _lesson(
    "smaller-tp-same-calls",
    "Smaller TP need not mean fewer collective calls",
    "Changing TP changes group size and per-rank work; each layer may still issue the same number of collectives.",
    "collective calls per step and the critical path at the other TP degree",
    "calls per step fall and the exposed communication with them",
    "calls per step stay the same (only message size and group change)",
)
GRAPH_SHARE = _lesson(
    "graphs-remove-launch-share-only",
    "A graph removes only the launch share it replaces",
    "Replay removes host launch cost; waiting on a dependency, another rank or the client stays.",
    "the launch part of the critical-path budget, and a graph-replay run at the same shapes",
    "the step falls by about the launch part",
    "the step falls by much less (the gaps are other waits)",
)
SPARSITY_EP = _lesson(
    "sparsity-is-not-ep",
    "Sparse routing alone does not mean expert parallelism will help",
    "TP can already run the selected expert shards; EP changes per-rank bytes and adds all-to-all traffic, so it must be measured.",
    "per-rank bytes and the critical path under both layouts at the same routing (`diagnoser bound` then a trace)",
    "EP lowers the critical rank's bytes and time at the served batch",
    "all-to-all or imbalance eats the saving",
)
SAMPLING_INSPECT = _lesson(
    "sampling-not-necessarily-cpu",
    "Sampling is not necessarily CPU work: inspect the implementation",
    "Many engines sample on the GPU; host time around sampling may be a sync or a copy, not the sampling itself.",
    "where the engine's sampler runs, and the host timeline around it",
    "sampling kernels run on the CPU or the host waits on a device-to-host copy per step",
    "sampling runs on the GPU without a per-step host wait",
)


class LessonRules(RuleSet):
    @rule(LOW_FRACTION_LESSON, Bound(fraction_of_ceiling=MATCH.fraction), TEST(lambda fraction: fraction < LOW_FRACTION))
    def low_fraction(self, fraction):
        return Finding(evidence=[ev("bound.fraction_of_ceiling", fraction)])

    @rule(LOW_FRACTION_LESSON, Claim(name="fraction_is_normal"))
    def fraction_claimed_normal(self):
        return Finding(evidence=[ev("claims", "fraction_is_normal")])

    @rule(TP_CALLS, OR(Holds(rule="exposed-comm"), Claim(name="smaller_tp_fewer_collectives")))
    def smaller_tp_same_calls(self):
        return Finding(evidence=[ev("trigger", "exposed communication or a claim about TP")])

    @rule(
        GRAPH_SHARE,
        OR(Holds(rule="launch-gaps"), Claim(name="graphs_close_gap")),
        Budget(launch_ms=MATCH.launch, step_ms=MATCH.step),
    )
    def graphs_launch_share(self, launch, step):
        best = step / max(step - launch, 1e-9)
        return Finding(
            evidence=[ev("budget.launch_ms", launch, "ms"), ev("budget.step_ms", step, "ms")],
            detail=f"Here that is at most {launch:.3g} of {step:.3g} ms: {best:.3f}x even if every launch gap vanished.",
        )

    @rule(SPARSITY_EP, OR(Holds(rule="small-expert-kernels"), Claim(name="ep_will_help")))
    def sparsity_is_not_ep(self):
        return Finding(evidence=[ev("trigger", "small expert kernels or a claim that EP will help")])

    @rule(SAMPLING_INSPECT, OR(Holds(rule="host-overhead"), Claim(name="sampling_on_cpu")))
    def sampling_inspect(self):
        return Finding(evidence=[ev("trigger", "host overhead or a claim that sampling runs on the CPU")])
