"""Named host work on the decode path: detokenizing, sampling, penalties, masks, bookkeeping.

The device bound counts none of it, and a graph does not remove it. A cost timed per step
is a measured time: it bounds what moving it off the critical path can buy (all of it at
most; it may already overlap the step, which the check settles). A cost only described
indicates where to look and bounds nothing yet.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    NOT,
    TEST,
    W,
    Expectation,
    Finding,
    Grade,
    HostCostFact,
    Metrics,
    Platform,
    Reference,
    RuleSet,
    RunDiff,
    Server,
    ev,
    load_specs,
    rule,
)

from diagnoser.rules.comparison import ablation, ablation_finding
from diagnoser.rules.launch import DEVICE_STEP_CEILING_MS, on_cpu
from diagnoser.rules.output_path import HISTORY_GROWTH
from diagnoser.rules.rates import ENGINE_GAP, engine_gap, gap_evidence, typical_ms

SPECS = load_specs(__file__)

# A timed host cost worth naming: at least 3 % of the measured step (or 0.05 ms when no step is known).
MIN_SHARE = 0.03
MIN_MS = 0.05
# A first token a thousand decode steps late is not a prompt's prefill (a 32K-token prompt fills in a few hundred
# steps' time: prefill runs hundreds of tokens per step's time) nor an admission queue the server timed: with a
# grammar on, it is the grammar being compiled before the first token.
FIRST_TOKEN_STEPS = 1000
# Host costs a grammar or schema constraint adds on every step.
MASK_COSTS = {"structured_output", "logits_processors"}
# How a serving load states that several streams decode at once: the requests in flight, the sequences the engine
# decoded together, or a rate of completed requests (a load of many, not one stream's run).
SEVERAL_STREAMS = ("concurrency", "running_sequences", "requests_per_s")


def several_streams(m) -> bool:
    return (m.get("concurrency") or 0) > 1 or (m.get("running_sequences") or 0) > 1 or m.get("requests_per_s") is not None


def grammar_wait_ms(m) -> float | None:
    """The first token's time beyond what the server timed as queueing (none timed: all of it)."""
    ttft = typical_ms(m, "ttft")
    return None if ttft is None else ttft - (typical_ms(m, "queue") or 0.0)


def timed_ms(c, step: float | None) -> float | None:
    """The cost per step as measured: its own figure, else its share of the measured step."""
    if not c.get("measured", True):
        return None
    if "ms_per_step" in c:
        return c["ms_per_step"]
    if "share_of_step" in c and step:
        return c["share_of_step"] * step
    return None


def _evidence(c, ms: float | None) -> list:
    name = c["name"]
    out = [ev(f"host_costs[{name}].ms_per_step", ms, "ms")] if ms is not None else [ev(f"host_costs[{name}]", "described, not timed")]
    for field, unit in (("reference_ms", "ms"), ("share_of_step", ""), ("exposed", "")):
        if field in c:
            out.append(ev(f"host_costs[{name}].{field}", c[field], unit))
    if c.get("grows_with"):
        out.append(ev(f"host_costs[{name}].grows_with", ", ".join(c["grows_with"])))
    return out


def claimed_by_a_mechanism(c) -> bool:
    """Costs a more specific rule holds (one hypothesis per measured time): penalties that grow
    with the history (penalty-over-history), work sized by the configured maximum context
    (max-context-work)."""
    grows = set(c.get("grows_with") or ())
    return (c["name"] == "penalties" and bool(HISTORY_GROWTH & grows)) or "max_context" in grows


def host_cost_finding(c, step: float | None) -> Finding | None:
    """A host cost on the decode path: measured when timed. Untimed, it is indicated by the kind of work named; one
    of no named kind ("other") says only that someone saw host work there, so it is possible, and a physical fact of
    the case (weights that do not fit, a device idle) comes before it."""
    if claimed_by_a_mechanism(c):
        return None
    ms = timed_ms(c, step)
    if ms is not None and ms < (MIN_SHARE * step if step else MIN_MS):
        return None
    detail = ""
    if ms is not None and "reference_ms" in c:
        detail = f"It took {c['reference_ms']:.3g} ms in the reference run: {ms - c['reference_ms']:.3g} ms of growth."
    return Finding(evidence=_evidence(c, ms), removable_ms=ms, key=c["name"], detail=detail,
                   grade=Grade.possible if ms is None and c["name"] == "other" else None)


class HostCostRules(RuleSet):
    @rule(SPECS["host-cost"], AS.c << HostCostFact(), Reference(step_ms=MATCH.step))
    def host_cost(self, c, step):
        return host_cost_finding(c, step)

    @rule(SPECS["host-cost"], AS.c << HostCostFact(), NOT(Reference(step_ms=W())))
    def host_cost_without_step(self, c):
        return host_cost_finding(c, None)

    @rule(SPECS["structured-output-overhead"], *ablation("structured_output"))
    def structured_output_measured(self, d):
        return ablation_finding(d)

    @rule(
        SPECS["structured-output-overhead"],
        Server(structured_output=True),
        AS.e << Expectation(kind="other_engine"),
        AS.m << Metrics(),
        TEST(lambda m, e: (engine_gap(m, e) or 0) >= ENGINE_GAP),
    )
    def constrained_job_faster_elsewhere(self, m, e):
        """The same constrained job at least twice as fast under another engine: both pay for the grammar, so what
        differs is how this one applies it, and a mask built on the host for every token is the usual difference.
        Indicated by the configuration and the gap; the job without the grammar on this engine measures it."""
        gap = engine_gap(m, e)
        return Finding(
            evidence=[ev("server.structured_output", True), ev("expected.kind", "other_engine"), *gap_evidence(m, e),
                      ev("engine_gap", gap, "x")],
            grade=Grade.indicated,
            detail=f"Another engine runs the same constrained job {gap:.3g}x faster.",
        )

    @rule(
        SPECS["structured-output-overhead"],
        Server(structured_output=True),
        AS.m << Metrics(per_token_ms=MATCH.step),
        TEST(lambda m, step: (grammar_wait_ms(m) or 0.0) >= FIRST_TOKEN_STEPS * step),
    )
    def grammar_compiled_before_first_token(self, m, step):
        """Decoding under a grammar, and the first token took thousands of steps' time beyond any queueing: the
        grammar is compiled (or its token masks precomputed) before the first token. Indicated: the first-token
        time with and without the constraint measures it."""
        ttft = typical_ms(m, "ttft")
        return Finding(
            evidence=[ev("server.structured_output", True), ev("metrics.ttft_ms", ttft, "ms"), ev("metrics.per_token_ms", step, "ms")],
            detail=f"The first token took {ttft / step:.0f} steps' time ({ttft:.4g} ms against {step:.3g} ms per token); the cost is "
            "in the first token (a rate over whole requests counts it), not in each step.",
        )

    @rule(
        SPECS["structured-output-overhead"],
        Server(structured_output=True),
        Metrics(per_token_ms=MATCH.step),
        Platform(device_api=MATCH.api),
        TEST(lambda step, api: step >= DEVICE_STEP_CEILING_MS and not on_cpu(api)),
    )
    def grammar_beyond_any_device_step(self, step, api):
        """Decoding under a grammar on an accelerator, at a time per token no device step can take: the time is off the
        device, and the grammar's mask path (built, copied or waited for on the host) is the off-device work the
        configuration names. Possible: queueing or swapping spend time off the device too, and nothing yet separates
        them; a run without the constraint, or a host profile of the mask path, does."""
        return Finding(
            evidence=[ev("server.structured_output", True), ev("metrics.per_token_ms", step, "ms"), ev("platform.device_api", api)],
            grade=Grade.possible,
            detail=f"{step:.4g} ms a token is beyond the {DEVICE_STEP_CEILING_MS:.4g} ms that reading every byte of an "
            "accelerator's memory once takes; the device is not what spends it.",
        )

    @rule(
        SPECS["structured-output-overhead"],
        Server(structured_output=True),
        AS.m << Metrics(),
        TEST(lambda m: several_streams(m)),
        NOT(RunDiff(setting="structured_output")),
        NOT(HostCostFact(name=W())),
    )
    def grammar_on_many_streams(self, m):
        """A grammar or schema on the requests of a serving load: every step, each constrained stream's next-token
        mask is built on the host and applied before sampling, work no device bound counts and that grows with the
        streams constrained (tens of microseconds each: milliseconds a step at a few dozen streams, beside steps of
        tens). Possible from the setting and the load alone, as a format is: nothing timed yet says what it costs here
        (a run without the constraint, or a host profile of the mask path, does); a run that compared it, or a timed
        host cost, decides it instead. One stream's mask is a few tens of microseconds a token, too little to name."""
        load = [ev(f"metrics.{name}", m[name]) for name in SEVERAL_STREAMS if m.get(name) is not None]
        return Finding(evidence=[ev("server.structured_output", True), *load], grade=Grade.possible,
                       detail="A run of the same load without the constraint measures it.")

    @rule(
        SPECS["structured-output-overhead"],
        Server(structured_output=True),
        HostCostFact(name=MATCH.name),
        TEST(lambda name: name in MASK_COSTS),
    )
    def structured_output_indicated(self, name):
        return Finding(evidence=[ev("server.structured_output", True), ev("host_costs", name)])
