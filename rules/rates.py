"""Is the figure a decode rate at all? Guards on how a serving figure was measured.

Before any cause, the comparison itself must hold: an observation faster than the physical
floor means the bound, the bandwidth or the boundary is wrong; a rate that includes prefill,
warm-up or another concurrency describes other work; a chunk interval is not a token
interval when chunks carry several tokens. These guards lead the report: every gain below
them refers to a figure they put in doubt.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    NOT,
    OR,
    TEST,
    Bound,
    Boundaries,
    Budget,
    ContextSweep,
    Expectation,
    Finding,
    Layout,
    Metrics,
    ObservedStep,
    P,
    RuleSet,
    RunDiff,
    Server,
    Stream,
    W,
    ev,
    load_specs,
    rule,
)
from diagnoser.engine.canonical import SHORT_PROMPT
from diagnoser.engine.comparison import OFF, STREAM_COUNT_SETTINGS, same_run
from diagnoser.engine.facts import PER_TOKEN_FIGURES
from diagnoser.models.serving import ENGINE_SIDE, WORKLOAD_SETTINGS
from diagnoser.rules.comparison import SLOWER, SPREAD_SETTINGS, larger


SPECS = load_specs(__file__)

# Below 95 % of the floor is beyond the bound's rounding and a datasheet-vs-measured bandwidth spread.
BELOW_FLOOR = 0.95
# A chunk interval 1.5x the per-token time means chunks hold about 1.5 tokens or more.
CHUNK_RATIO = 1.5
# The mean gap over all chunks weighs stall-heavy requests more than a mean of per-request TPOTs: on the real vLLM with
# long prompts stalling the steps (p99 gap 70.7 ms against a 2.5 ms token) the mean ITL was 1.75x the mean TPOT with
# 1.08 tokens a chunk. Twice that spread is beyond what pooling can do.
MEAN_CHUNK_RATIO = 3.5
# Chunks that hold a twentieth more tokens than one each put the chunk rate 5 % off the token rate, the
# repeatability of a serving benchmark; below that (a real vLLM stream at 1.002: one chunk in 500 carried
# two tokens) counting chunks as tokens changes nothing a comparison could see.
MULTI_TOKEN_CHUNKS = 1.05
# A budget's step within 15 % of the observed device step describes the same steps (step-to-step
# spread and a trace's own overhead stay inside that); beyond it, it describes other work.
STEP_AGREEMENT = 0.15
# Concurrencies 2x apart are different operating points.
CONCURRENCY_RATIO = 2.0
# At 80 % of the memory-only ceiling little is left to recover: kernels rarely sustain more than
# ~90 % of peak bandwidth over a whole step.
NEAR_BOUND = 0.7
# Another engine at least twice as fast per stream on the same work and device: engines tuned for a device differ by
# tens of per cent; twice is a fast path (native kernels, graph capture, a fused attention) one of them lacks there.
ENGINE_GAP = 2.0
# An expected stream 10 % faster than one token per floor step is beyond the bound's own optimism (datasheet
# bandwidth, bytes counted once), not a rounding of it.
BEYOND_CEILING = 1.1
# The output's extra time at the observed rate within 15 % of the first token's time is that time: a first
# token and a decode rate quoted from one run differ by more than that only if something else changed.
FIRST_TOKEN_MATCH = 0.15
# Per-token figures within 25 % of each other agree within streaming jitter (the client-gap slack).
TIMING_AGREEMENT = 1.25
# A mean of per-request rates runs faster than one over the mean TPOT wherever requests differ, by tens of per cent;
# a TPOT twice the time a token the rate gives holds as much time again as decode took: the windows differ.
WINDOW_APART = 2.0


def disagree(client: float, served: float) -> bool:
    return max(client, served) >= TIMING_AGREEMENT * min(client, served)


def engine_side(boundary) -> bool:
    return boundary in ENGINE_SIDE


def speculating(method) -> bool:
    """A speculative method is configured: a step then makes several tokens, so it is no token time."""
    return bool(method)


def stream_interval_ms(m) -> float | None:
    """One stream's time per token from its rate: its own, else the aggregate shared by the streams in flight."""
    if m.get("per_user_tokens_per_s"):
        return 1e3 / m["per_user_tokens_per_s"]
    return m.get("implied_per_token_ms")


def burst_finding(s, client_field: str, client_what: str, client: float, served_what: str, served: float) -> Finding:
    """The client's per-token figure from a bursty stream beside the engine-side one it disagrees with."""
    return Finding(
        evidence=[*_burst_evidence(s), ev(client_field, client, "ms"), ev("engine_per_token_ms", served, "ms")],
        detail=f"The client's {client_what} is {client:.4g} ms, {served_what} {served:.4g} ms.",
    )


def _burst_evidence(s) -> list:
    return [ev(f"stream.{n}", s[n]) for n in ("bursty", "near_zero_gap_fraction", "tokens_per_burst") if n in s]


def expected_rate(e) -> str:
    """The expected figure's rate kind: as stated, else read from which figure was given."""
    if e.get("rate", "unknown") != "unknown":
        return e["rate"]
    if "output_tokens_per_s" in e and "per_user_tokens_per_s" not in e:
        return "aggregate"
    if "per_user_tokens_per_s" in e and "output_tokens_per_s" not in e:
        return "per_user"
    return "unknown"


# References that time the same job the same way on another build, configuration or machine: a rate that
# includes prefill is compared with one that includes the same prefill.
SAME_JOB_KINDS = frozenset({"older_version", "earlier_in_run", "other_config", "other_hardware"})


def decode_timed(m) -> bool:
    """A per-token time that leaves the first token out (TPOT, inter-token intervals), not one from a rate."""
    return any(name.startswith(("tpot_", "itl_")) for name in m)


def boundaries_apart(observed: str, expected: str) -> bool:
    """Both figures name where they were read, and not the same place: then they time different spans."""
    return "unknown" not in (observed, expected) and observed != expected


def read_apart(m, e) -> bool:
    return boundaries_apart(m.get("boundary", "unknown"), e.get("boundary", "unknown"))


def timed_the_same_way(m, e) -> bool:
    """The same job, on another build, configuration or machine, read at the same boundary. Two figures whose
    boundaries nobody stated are not known to time the same span: one may count the prompt, the other not."""
    return e.get("kind") in SAME_JOB_KINDS and e.get("boundary", "unknown") == m.get("boundary", "unknown") != "unknown"


# A prompt token costs at most this many decode steps' time: a prefill reads the weights once for the whole prompt,
# so its tokens cost arithmetic alone, a small fraction of a decode step on an accelerator and under four steps even
# on a CPU whose matmuls run at a fiftieth of a GPU's FLOPs for its bandwidth (int4 weights: 2 FLOPs a parameter
# against half a byte read).
PROMPT_TOKEN_STEPS = 4.0
# And at least this small a fraction: a prompt token needs about two FLOPs a weight, a decode step reads each weight's
# bytes once, so a prompt token costs at least (FLOPs a byte the device can feed) of a step: about a 300th on an
# H100 or B200 at bf16 (3.35 TB/s against 990 TFLOP/s), more with weights quantized below their compute format.
# Twice that margin: 600 prompt tokens take at least one decode step's time.
PROMPT_TOKENS_PER_STEP = 600


def prefill_can_move_it(m) -> bool:
    """A rate over whole requests can be slower than decode by their prefill at most: with the prompt and output
    lengths known, that is (prompt x PROMPT_TOKEN_STEPS + output) / output; under the timing agreement it moves the
    rate no more than streaming jitter does. A warm-up in the window has no such limit."""
    prompt, output = m.get("input_tokens"), m.get("output_tokens")
    if m.get("window_includes_warmup") or not prompt or not output:
        return True
    return (prompt * PROMPT_TOKEN_STEPS + output) / output >= TIMING_AGREEMENT


def prompt_outweighs_decode(m) -> bool:
    """Requests whose prompt, at the fastest an accelerator processes prompt tokens, takes at least as long as their
    whole decode: a rate over their whole time is mostly the prompt's."""
    prompt, output = m.get("input_tokens"), m.get("output_tokens")
    return bool(prompt and output) and prompt / PROMPT_TOKENS_PER_STEP >= output


def counts_fewer_than_returned(m, rate: float, tokens: float) -> bool:
    """A stream's rate times its request's whole latency, against the tokens the request returned: fewer by the chunk
    ratio, the rate counted units of several tokens."""
    latency = typical_ms(m, "request_latency")
    return latency is not None and tokens >= CHUNK_RATIO * rate * latency / 1e3


def includes_more_than_decode(m) -> bool:
    """The rate counts prefill or warm-up, and no decode-only time stands beside it that agrees with it: a TPOT
    the rate is slower than (beyond streaming jitter) is the decode time the rate was not. A prompt too short beside
    its output to move the rate beyond jitter is no such count."""
    return (bool(m.get("rate_includes_prefill") or m.get("window_includes_warmup")) and prefill_can_move_it(m)
            and (not decode_timed(m) or rate_below_tpot(m)))


def warm_up_only_here(m, e) -> bool:
    """The observation's window holds a warm-up and the reference's does not: warm-up is paid once after a start."""
    return bool(m.get("window_includes_warmup")) and e.get("window_includes_warmup") is False


def chunk_and_token_ms(m) -> tuple[str, float, str, float] | None:
    """(the inter-chunk figure, its value, the per-token figure, its value) of one statistic, where the chunks' gap is
    CHUNK_RATIO or more times the time per token: means with means, medians with medians, else the median gap
    against the per-token time the aggregate rate implies. None otherwise."""
    pairs = (("itl_p50_ms", "tpot_p50_ms", CHUNK_RATIO), ("itl_p50_ms", "implied_per_token_ms", CHUNK_RATIO),
             ("itl_mean_ms", "tpot_mean_ms", MEAN_CHUNK_RATIO))
    for itl_name, tpot_name, ratio in pairs:
        itl, tpot = m.get(itl_name), m.get(tpot_name)
        if itl and tpot:
            label = f"metrics.{tpot_name}" if tpot_name.startswith("tpot") else "per_token_ms"
            return (itl_name, itl, label, tpot) if itl >= ratio * tpot else None
    return None


def typical_ms(m, name: str) -> float | None:
    """A latency figure of the metrics: its mean, else its median."""
    return m.get(f"{name}_mean_ms", m.get(f"{name}_p50_ms"))


def tpot_over_rate(m) -> float | None:
    """One stream's TPOT over the time a token its own stated rate gives: 1 where the two time the same decode."""
    rate, tpot = m.get("per_user_tokens_per_s"), typical_ms(m, "tpot")
    return tpot * rate / 1e3 if rate and tpot else None


def tpot_beyond_rate(m) -> bool:
    """The TPOT at least WINDOW_APART times the rate's time a token: more than averaging can do."""
    return (tpot_over_rate(m) or 0.0) >= WINDOW_APART


def rate_below_tpot(m) -> bool:
    """One stream's rate slower than the TPOT beside it says (beyond streaming jitter)."""
    return (tpot_over_rate(m) or 1.0) * TIMING_AGREEMENT < 1


def per_stream_rate(side, rate_kind: str) -> float | None:
    """One stream's tokens/s on a side stated per stream, or as an aggregate over a known concurrency, else from
    a time per token (TPOT, ITL): a time between one stream's tokens is a per-stream figure whatever the load."""
    if rate_kind == "per_user" and "per_user_tokens_per_s" in side:
        return side["per_user_tokens_per_s"]
    if rate_kind == "aggregate" and "output_tokens_per_s" in side and side.get("concurrency"):
        return side["output_tokens_per_s"] / side["concurrency"]
    if side.get("per_token_ms"):
        return 1e3 / side["per_token_ms"]
    return None


def engine_gap(m, e) -> float | None:
    """How many times faster the other side ran one stream, or the same fixed job, at the same concurrency (or with
    one side's unstated)."""
    if None not in (m.get("concurrency"), e.get("concurrency")) and m["concurrency"] != e["concurrency"]:
        return None
    mine, theirs = stream_rates(m, e)
    if mine and theirs:
        return theirs / mine
    if m.get("duration_s") and e.get("duration_s"):
        return m["duration_s"] / e["duration_s"]
    return None


def gap_evidence(m, e) -> list:
    """The two figures the gap is read from: each side's stream rate, else the wall time of the same job."""
    mine, theirs = stream_rates(m, e)
    if mine and theirs:
        return [ev("metrics.per_stream_tokens_per_s", mine), ev("expected.per_stream_tokens_per_s", theirs)]
    return [ev("metrics.duration_s", m["duration_s"], "s"), ev("expected.duration_s", e["duration_s"], "s")]


def stream_ceiling(floor_ms: float) -> float:
    """Tokens/s of one stream at one token per floor step."""
    return 1e3 / floor_ms


def stream_rates(m, e) -> tuple[float | None, float | None]:
    """(the observation's, the expectation's) tokens/s for one stream, each read as its side states its rate."""
    observed = "per_user" if "per_user_tokens_per_s" in m else "aggregate"
    return per_stream_rate(m, observed), per_stream_rate(e, expected_rate(e))


def stated_per_stream(side) -> bool:
    """The side gives one stream's rate itself, not an aggregate shared out over many streams."""
    return "per_user_tokens_per_s" in side or one_stream(side)


def beyond_batching(e, m) -> bool:
    """Whether the two sides' concurrencies cannot explain the gap between their per-stream rates. Batching
    never makes a step longer than running its sequences one after another, so c_hi streams each get at
    least c_lo / c_hi of what each of c_lo streams gets, and fewer streams never get less each; a gap past
    either (beyond streaming jitter) is a slowdown, not another operating point."""
    c_e, c_m = e.get("concurrency"), m.get("concurrency")
    r_m, r_e = stream_rates(m, e)
    if not (c_e and c_m and r_e and r_m) or c_e == c_m:
        return False
    (c_lo, r_lo), (c_hi, r_hi) = sorted(((c_e, r_e), (c_m, r_m)))
    return r_hi * TIMING_AGREEMENT < r_lo * c_lo / c_hi or r_lo * TIMING_AGREEMENT < r_hi


# Figures of all the streams' work together: the tokens a second in all, or the wall time of one fixed job (the same
# requests, whatever the streams it was run over).
AGGREGATE_FIGURES = ("output_tokens_per_s", "duration_s")


def aggregate_fell(d) -> bool:
    """Runs that differ in the streams in flight, the one with more making fewer tokens a second in all (or taking
    longer over the same job)."""
    return (d["setting"] in STREAM_COUNT_SETTINGS and d["figure"] in AGGREGATE_FIGURES and d["slowdown"] >= SLOWER
            and larger(d["slower"], d["faster"]))


def same_load_rates(m, e) -> tuple[str, float, float] | None:
    """(what is compared, the observation's rate, the reference's) where both sides read the same load: one
    stream each, or aggregates over as many streams (neither side naming a count, as two figures of one
    benchmark run do, is as many). Other streams beside one side could slow it for their own reasons."""
    if one_stream(m) and one_stream(e):
        mine, theirs = stream_rates(m, e)
        return ("per_stream_tokens_per_s", mine, theirs) if mine and theirs else None
    if expected_rate(e) == "aggregate" and m.get("output_tokens_per_s") and e.get("output_tokens_per_s") \
            and m.get("concurrency") == e.get("concurrency"):
        return "output_tokens_per_s", m["output_tokens_per_s"], e["output_tokens_per_s"]
    return None


def chunk_counted(m, e) -> bool:
    """Both sides read the same load, and the reference reads at least a multi-token chunk's worth more."""
    rates = same_load_rates(m, e)
    return rates is not None and rates[2] >= CHUNK_RATIO * rates[1]


def first_token_gap(m, e) -> tuple[float, float] | None:
    """(the time the observed rate gives one stream's output beyond what the expected rate gives it, the first
    token's time), when both sides state one stream's rate and the observed rate is the slower. An aggregate
    shared out over many streams mixes their queueing and first tokens into each share."""
    r_m, r_e = stream_rates(m, e) if all(stated_per_stream(side) for side in (m, e)) else (None, None)
    tokens, ttft = m.get("output_tokens"), typical_ms(m, "ttft")
    if not (r_m and r_e and tokens and ttft) or r_m >= r_e:
        return None
    return 1e3 * tokens * (1 / r_m - 1 / r_e), ttft


def gap_is_the_first_token(m, e) -> bool:
    """The observed rate is the expected decode rate with the first token's time added to the output's: the
    rate counts prefill (and queueing) that the reference leaves out, whatever kind of reference it is."""
    found = first_token_gap(m, e)
    return found is not None and abs(found[0] - found[1]) <= FIRST_TOKEN_MATCH * found[1]


def decode_meets_what_the_rate_misses(m, e) -> tuple[float, float, float] | None:
    """(TPOT, the stream's rate, the expected rate) when the observation's decode-only time per token is as fast as the
    reference's rate while its rate over the stream, which counts the first token (or a warm-up), falls short of it:
    the shortfall is not in decode. None otherwise, and None where the reference states its own time per token and
    the TPOT is slower than it: decode alone then falls short of decode alone, whatever the reference's rate over
    whole requests (which counts its prompts too) says."""
    tpot, (rate, expected) = typical_ms(m, "tpot"), stream_rates(m, e)
    if tpot and e.get("per_token_ms") and tpot > e["per_token_ms"]:
        return None
    return (tpot, rate, expected) if tpot and rate and expected and 1e3 / tpot >= expected > rate else None


def precision_assumed(b) -> bool:
    """The bound took the default precision because the case states none."""
    return "workload.precision" in (b.get("lacks") or ())


def one_stream(side) -> bool:
    """The side stated as an aggregate rate timed a single stream: its aggregate is that stream's rate."""
    return side.get("concurrency") == 1


class RateGuards(RuleSet):
    @rule(
        SPECS["faster-than-floor"],
        AS.b << Bound(floor_ms=MATCH.floor, observed_step_ms=MATCH.observed),
        TEST(lambda b, floor, observed: observed < BELOW_FLOOR * floor and not precision_assumed(b)),
    )
    def faster_than_floor(self, b, floor, observed):
        return Finding(
            evidence=[ev("bound.floor_ms", floor, "ms"), ev("bound.observed_step_ms", observed, "ms"), ev("observed_over_floor", observed / floor)],
            detail=f"Observed {observed:.4g} ms per step against a {floor:.4g} ms floor.",
        )

    @rule(
        SPECS["floor-assumes-precision"],
        AS.b << Bound(floor_ms=MATCH.floor, observed_step_ms=MATCH.observed),
        TEST(lambda b, floor, observed: observed < BELOW_FLOOR * floor and precision_assumed(b)),
    )
    def faster_than_an_assumed_floor(self, b, floor, observed):
        """The floor was computed at the default bf16 because the case gives no precision: beating it says the
        served weights are smaller, not that the figure is wrong, so the causes keep their place."""
        return Finding(
            evidence=[ev("bound.floor_ms", floor, "ms"), ev("bound.observed_step_ms", observed, "ms"), ev("bound.lacks", "workload.precision")],
            missing=["workload.precision"],
            detail=f"Observed {observed:.4g} ms per step against a {floor:.4g} ms floor computed for bf16 weights and KV cache.",
        )

    @rule(
        SPECS["rate-includes-prefill"],
        AS.m << Metrics(),
        AS.e << Expectation(),
        NOT(RunDiff(setting=P(lambda s: s not in WORKLOAD_SETTINGS), slowdown=P(lambda x: x >= SLOWER))),
        TEST(lambda m, e: includes_more_than_decode(m) and not timed_the_same_way(m, e)),
    )
    def rate_includes_prefill(self, m, e):
        """A rate that counts more than decode, held against a reference that counts decode alone (a bound, a
        vendor's figure, the engine's own count); the same job timed the same way on another version or
        configuration includes the same prefill. Runs of the same job that change one setting of how it is served,
        one clearly slower, are that: their delta stands even where nobody named the boundary (a delta within noise
        may be what the prefill in both hides)."""
        return self.rate_flags_finding()

    @rule(
        SPECS["rate-includes-prefill"],
        AS.m << Metrics(),
        AS.e << Expectation(),
        TEST(lambda m, e: bool(m.get("rate_includes_prefill") or m.get("window_includes_warmup"))
             and decode_meets_what_the_rate_misses(m, e) is not None),
    )
    def decode_already_meets_the_reference(self, m, e):
        """The rate counts prefill or a warm-up, and the TPOT beside it, decode alone, already reaches the expected
        rate: what the rate misses is the part that is not decode (a cold first token, a compile), however close the
        two figures are."""
        tpot, rate, expected = decode_meets_what_the_rate_misses(m, e)
        return Finding(
            evidence=[*self.rate_flags_finding().evidence, ev("metrics.tpot_ms", tpot, "ms"),
                      ev("metrics.per_stream_tokens_per_s", rate), ev("expected.per_stream_tokens_per_s", expected)],
            detail=f"Decode alone runs {1e3 / tpot:.4g} tokens/s a stream (TPOT {tpot:.4g} ms), at or above the expected "
            f"{expected:.4g}; the rate's {rate:.4g} counts more than decode.",
        )

    @rule(
        SPECS["rate-includes-prefill"],
        AS.m << Metrics(),
        AS.e << Expectation(),
        TEST(lambda m, e: includes_more_than_decode(m) and warm_up_only_here(m, e)),
    )
    def warm_up_only_in_the_observation(self, m, e):
        """The same job timed the same way, but only the observation's window held the warm-up: the reference was
        read after it."""
        return self.rate_flags_finding()

    @rule(
        SPECS["rate-includes-prefill"],
        AS.m << Metrics(),
        NOT(Expectation()),
        NOT(ContextSweep()),
        NOT(RunDiff(setting=P(lambda s: s not in WORKLOAD_SETTINGS))),
        TEST(lambda m: includes_more_than_decode(m)),
    )
    def rate_alone_includes_prefill(self, m):
        """No reference: the rate itself is the figure read as decode speed. Across a sweep of prompt
        lengths the long-context rules judge the growth instead, and runs of the same job (one setting of how it
        is served changed, not the work) timed the same way include the same prefill, so their delta stands."""
        return self.rate_flags_finding()

    @rule(
        SPECS["rate-includes-prefill"],
        AS.m << Metrics(),
        ContextSweep(context_hi=P(lambda hi: hi <= SHORT_PROMPT)),
        TEST(lambda m: includes_more_than_decode(m)),
    )
    def short_prompts_differ(self, m):
        """Runs that differ only in a short prompt, timed by a rate that counts prefill: decode reads about the same
        bytes a step over every such prompt, so what separates the runs is each one's own prefill, and no run among
        them (nor a reference taken from one) is the same job as another. Over longer prompts decode itself grows,
        and the long-context rules judge the sweep."""
        return self.rate_flags_finding()

    @rule(
        SPECS["rate-includes-prefill"],
        AS.m << Metrics(),
        AS.e << Expectation(),
        NOT(Metrics(rate_includes_prefill=W())),
        TEST(lambda m, e: not decode_timed(m) and gap_is_the_first_token(m, e)),
    )
    def gap_is_first_token(self, m, e):
        """The output takes longer at the observed rate than at the expected one by the first token's time: the
        observed figure timed the first token too, the reference did not."""
        gap, ttft = first_token_gap(m, e)
        return Finding(
            evidence=[ev("metrics.output_tokens", m["output_tokens"]), ev("metrics.ttft_ms", ttft, "ms"),
                      ev("output_time_beyond_expected_ms", gap, "ms")],
            detail=f"At the observed rate the output takes {gap:.4g} ms longer than at the expected one; the first token "
            f"alone took {ttft:.4g} ms.",
        )

    @rule(
        SPECS["rate-includes-prefill"],
        Stream(worst_stall_ms=MATCH.stall),
        Metrics(input_tokens=MATCH.prompt),
        OR(Metrics(concurrency=1), Layout(batch=1)),
        NOT(Metrics(concurrency=P(lambda c: c > 1))),
        Server(chunked_prefill=True, max_num_batched_tokens=MATCH.chunk),
        TEST(lambda prompt, chunk: prompt > chunk),
    )
    def own_prompt_in_the_first_gap(self, stall, prompt, chunk):
        """One request alone has no other prompt to wait for. A prompt longer than a step's token budget is
        prefilled over several steps, and an engine that streams a first chunk (a role, an empty delta) after the
        first of them puts the rest of that prefill into the first gap between tokens: the stall is the request's
        own prefill, counted as decode."""
        steps = -(-prompt // chunk)
        return Finding(
            evidence=[ev("stream.worst_stall_ms", stall, "ms"), ev("streams", 1), ev("metrics.input_tokens", prompt),
                      ev("server.max_num_batched_tokens", chunk)],
            detail=f"The {prompt}-token prompt takes {steps} prefill steps of at most {chunk} tokens; with no other request, "
            f"the {stall:.4g} ms stall is the last {steps - 1} of them after a first chunk was streamed.",
        )

    @rule(
        SPECS["rate-includes-prefill"],
        Metrics(output_tokens=P(lambda n: n <= 1) & MATCH.tokens),
        OR(Metrics(output_tokens_per_s=W()), Metrics(per_user_tokens_per_s=W())),
    )
    def no_decode_in_the_requests(self, tokens):
        """A request that returns one token ends with its prefill: the prompt's pass produces the first token, so a
        rate over such requests times no decode step at all, whatever it is held against (a length cap the client
        applied, a stop condition met at once)."""
        return Finding(evidence=[ev("metrics.output_tokens", tokens)],
                       detail="One output token a request: every token counted came out of a prefill; no decode step was timed.")

    @rule(
        SPECS["rate-includes-prefill"],
        AS.m << Metrics(),
        OR(Metrics(per_user_tokens_per_s=W()), Metrics(output_tokens_per_s=W())),
        NOT(Metrics(rate_includes_prefill=W())),
        NOT(Metrics(window_includes_warmup=W())),
        TEST(lambda m: not decode_timed(m) and prompt_outweighs_decode(m)),
    )
    def prompt_outweighs_the_output(self, m):
        """A rate with no per-token time beside it, over requests whose prompt is so much longer than their output that
        processing it, at the fastest any accelerator runs a prompt token, takes at least as long as their whole
        decode: if the rate counts each request's whole time, most of that time is the prompt's. Whether it does is the
        client's definition; a TPOT beside it, or the flag, settles it."""
        prompt, output = m["input_tokens"], m["output_tokens"]
        return Finding(
            evidence=[ev("metrics.input_tokens", prompt), ev("metrics.output_tokens", output)],
            detail=f"{prompt:g} prompt tokens take at least {prompt / PROMPT_TOKENS_PER_STEP:.3g} decode steps' time, against "
            f"{output:g} generated: a rate over the whole request would time the prompt more than the decode.",
        )

    @rule(SPECS["rate-includes-prefill"], AS.m << Metrics(), TEST(lambda m: tpot_beyond_rate(m)))
    def tpot_window_holds_more(self, m):
        """One stream's TPOT well above the time a token its own stated rate gives: a TPOT is time per output token,
        whatever a step or a chunk emits, so the only way a rate of the same stream can be faster is a window that
        leaves time out. The TPOT's window holds what the rate's does not: the first decode steps compiling or warming
        up, a one-off stall. Its figure is not decode's, and held against a reference it blames decode for them."""
        tpot, rate = typical_ms(m, "tpot"), m["per_user_tokens_per_s"]
        return Finding(
            evidence=[ev("metrics.tpot_ms", tpot, "ms"), ev("metrics.per_user_tokens_per_s", rate)],
            detail=f"A TPOT of {tpot:.4g} ms is {tpot_over_rate(m):.3g}x the {1e3 / rate:.4g} ms a token that "
            f"{rate:.4g} tokens/s gives: the TPOT's window holds time the rate's leaves out.",
        )

    @rule(SPECS["rate-includes-prefill"], AS.d << RunDiff(setting="stream", slower=P(lambda v: v in OFF), figure=MATCH.figure))
    def unstreamed_reply_timed_whole(self, d, figure):
        """The same replies streamed and not, the unstreamed slower: a client that receives the reply whole sees no
        first token, so its figure spans the prompt's processing and the wait for the first token as well as the
        decode, where a streamed one can time from the first token on. The delta is that difference in what was
        timed, not a cost of turning streaming off."""
        return Finding(
            evidence=[ev("runs.changed", "stream"), ev("runs.slower", d["slower"]), ev("runs.figure", figure),
                      ev("runs.ratio", d["slowdown"])],
            detail=f"Unstreamed, the reply's {figure} is {d['slowdown']:.3g}x slower: it times the whole request.",
        )

    def rate_flags_finding(self) -> Finding:
        return Finding(evidence=[ev(f"metrics.{name}", True) for name in self.flags("rate_includes_prefill", "window_includes_warmup")])

    @rule(
        SPECS["rate-kind-mismatch"],
        AS.e << Expectation(),
        Metrics(per_user_tokens_per_s=MATCH.per_user),
        NOT(Metrics(output_tokens_per_s=W())),
        TEST(lambda e: expected_rate(e) == "aggregate" and not one_stream(e)),
    )
    def aggregate_against_per_user(self, e, per_user):
        return Finding(evidence=[ev("expected.rate", expected_rate(e)), ev("metrics.per_user_tokens_per_s", per_user)])

    @rule(
        SPECS["rate-kind-mismatch"],
        AS.e << Expectation(),
        AS.m << Metrics(output_tokens_per_s=MATCH.aggregate),
        NOT(Metrics(per_token_ms=W())),
        TEST(lambda e, m: expected_rate(e) == "per_user" and not one_stream(m)),
    )
    def per_user_against_aggregate(self, e, aggregate):
        return Finding(evidence=[ev("expected.rate", expected_rate(e)), ev("metrics.output_tokens_per_s", aggregate)])

    @rule(
        SPECS["expectation-beyond-bound"],
        AS.e << Expectation(kind=MATCH.kind),
        AS.b << Bound(fraction_of_ceiling=MATCH.fraction, ceiling_tokens_per_s=MATCH.ceiling),
        TEST(lambda b, fraction: fraction >= NEAR_BOUND and not precision_assumed(b)),
    )
    def near_the_bound(self, e, b, kind, fraction, ceiling):
        """Not on a floor that assumed bf16 for want of a stated precision: a quantized model's ceiling is higher, and
        the observation is then further from it than it looks. Nor where the expected figure is the faster side of
        runs that spread the model over its devices another way: the ceiling is the pinned layout's, and the other
        side of that A/B has its own."""
        if self.another_layouts_figure(e):
            return None
        return Finding(
            evidence=[ev("bound.fraction_of_ceiling", fraction), ev("bound.ceiling_tokens_per_s", ceiling), ev("expected.kind", kind)],
            detail=f"The observation already reaches {fraction:.0%} of the memory-only ceiling ({ceiling:.4g} tokens/s).",
        )

    @rule(
        SPECS["expectation-beyond-bound"],
        NOT(Expectation()),
        NOT(Budget()),
        AS.b << Bound(fraction_of_ceiling=MATCH.fraction, ceiling_tokens_per_s=MATCH.ceiling),
        TEST(lambda b, fraction: NEAR_BOUND <= fraction <= 1 and not precision_assumed(b)),
    )
    def near_the_bound_unasked(self, b, fraction, ceiling):
        """No figure was named as the hoped-for one, yet the case asks why a rate is not higher: at most of the
        ceiling, any faster figure asks for more than the bytes allow, whatever it was. Not past the ceiling: a floor
        the observation beats counts bytes that were not moved (the floor's guards say which). Not beside a step
        budget: a traced step says where its time goes, and a run near its floor with nothing asked of it is healthy."""
        return Finding(
            evidence=[ev("bound.fraction_of_ceiling", fraction), ev("bound.ceiling_tokens_per_s", ceiling)],
            detail=f"No expected figure was given, and the observation already reaches {fraction:.0%} of the memory-only "
            f"ceiling ({ceiling:.4g} tokens/s): what is left to recover is at most the rest.",
        )

    @rule(
        SPECS["expectation-beyond-bound"],
        AS.e << Expectation(kind=P(lambda k: k != "other_hardware")),
        AS.b << Bound(floor_ms=MATCH.floor),
        NOT(Server(speculative=W())),
        NOT(Layout(batch=P(lambda b: b > 1))),
        NOT(RunDiff(setting="quantization")),
        TEST(lambda e, b, floor: not precision_assumed(b)
             and (per_stream_rate(e, expected_rate(e)) or 0) >= BEYOND_CEILING * stream_ceiling(floor)),
    )
    def expected_stream_beyond_the_floor(self, e, b, floor):
        """A decode step gives each stream one token, and no step of this work is shorter than its floor, so no
        stream of it runs faster than one token per floor: an expected stream faster than that measured other work
        (speculation's several tokens a step, a smaller or more quantized model, another machine's bandwidth). Only
        with one sequence pinned (or none): a floor of many sequences' KV is longer than one stream alone needs. Not
        on a floor that assumed bf16 for want of a stated precision: the expected figure may be the served format's.
        Not where runs of two weight formats are compared, nor where the expected stream is the faster side of runs that
        spread the model over its devices another way: the other side's figure is then stated as such (a split that
        reads each device's share at once has a shorter floor than the pinned layout's), and the A/B measures what the
        change does."""
        if self.another_layouts_figure(e):
            return None
        rate = per_stream_rate(e, expected_rate(e))
        return Finding(
            evidence=[ev("expected.per_stream_tokens_per_s", rate), ev("bound.floor_ms", floor, "ms"),
                      ev("bound.stream_ceiling_tokens_per_s", stream_ceiling(floor)), ev("expected.kind", e["kind"])],
            detail=f"The expected {rate:.4g} tokens/s a stream is {rate / stream_ceiling(floor):.2f}x the one token per "
            f"{floor:.4g} ms floor this work allows a stream.",
        )

    @rule(
        SPECS["expectation-beyond-bound"],
        AS.e << Expectation(output_tokens_per_s=MATCH.rate, kind=P(lambda k: k != "other_hardware")),
        AS.b << Bound(ceiling_tokens_per_s=MATCH.ceiling),
        Layout(batch=MATCH.batch),
        NOT(Server(speculative=W())),
        NOT(RunDiff(setting=P(lambda s: s == "quantization" or s in SPREAD_SETTINGS))),
        TEST(lambda e, b, rate, ceiling, batch: expected_rate(e) == "aggregate" and not one_stream(e)
             and (e.get("concurrency") or 0) <= batch and not precision_assumed(b) and rate >= BEYOND_CEILING * ceiling),
    )
    def expected_aggregate_beyond_the_batch(self, e, b, rate, ceiling, batch):
        """Every step of the pinned batch reads the weights once for its sequences and gives each one token, so the
        batch makes at most its ceiling in all: an aggregate figure past it, stated at no larger load, was measured
        with more sequences a step (every extra one shares the same weight read), on a lighter model or format, or
        on another machine. Not on a floor that assumed bf16 for want of a stated precision, nor beside runs of two
        weight formats or two ways of spreading the model over its devices: their A/B states the other side's figure."""
        return Finding(
            evidence=[ev("expected.output_tokens_per_s", rate), ev("bound.ceiling_tokens_per_s", ceiling),
                      ev("workload.batch", batch), ev("expected.concurrency", e.get("concurrency", "not stated")),
                      ev("expected.kind", e["kind"])],
            detail=f"The expected {rate:.4g} tokens/s in all is {rate / ceiling:.2f}x the {ceiling:.4g} tokens/s that "
            f"{batch} sequences a step can make at the bound's floor.",
        )

    def another_layouts_figure(self, e) -> bool:
        """The expected stream's time per token is the faster side's of runs that spread the model over its devices
        another way (within a quoted figure's rounding): its floor is that layout's, not the pinned one's."""
        rate = per_stream_rate(e, expected_rate(e))
        return rate is not None and any(
            isinstance(f, RunDiff) and f["setting"] in SPREAD_SETTINGS and f["figure"] in PER_TOKEN_FIGURES
            and same_run(f["faster_time"], 1e3 / rate) for f in self.facts.values())

    @rule(
        SPECS["rate-kind-mismatch"],
        AS.e << Expectation(concurrency=MATCH.expected),
        AS.m << Metrics(concurrency=MATCH.observed),
        TEST(lambda expected, observed, e, m: max(expected, observed) >= CONCURRENCY_RATIO * min(expected, observed)
             and not beyond_batching(e, m)),
    )
    def other_concurrency(self, expected, observed, e, m):
        """Another concurrency is another operating point only while batching can explain the gap; a per-stream
        rate below what the extra streams could cost is a slowdown at that concurrency, for the causes to name. So is
        an aggregate that the case's own runs show falling as streams are added: batching never makes a step longer
        than running its sequences one after another, so more streams never make fewer tokens a second in all."""
        if any(isinstance(f, RunDiff) and aggregate_fell(f) for f in self.facts.values()):
            return None
        return Finding(evidence=[ev("expected.concurrency", expected), ev("metrics.concurrency", observed)])

    @rule(
        SPECS["rate-kind-mismatch"],
        AS.e << Expectation(),
        NOT(Expectation(concurrency=W())),
        RunDiff(setting=P(lambda s: s in STREAM_COUNT_SETTINGS), figure="output_tokens_per_s", slowdown=MATCH.gain),
        TEST(lambda e, gain: expected_rate(e) == "aggregate" and gain >= CONCURRENCY_RATIO),
    )
    def aggregate_reference_at_an_unstated_load(self, e, gain):
        """The case's own runs show the aggregate rate moving with the streams in flight (decode reads the weights once
        for every stream of a step), so an aggregate figure that states no concurrency is one operating point of a curve,
        not this run's target."""
        return Finding(
            evidence=[ev("expected.rate", "aggregate"), ev("expected.concurrency", "not stated"), ev("runs.aggregate_gain_with_streams", gain)],
            detail=f"More streams gave {gain:.3g}x the aggregate rate here; the reference's figure is comparable only at its own concurrency.",
        )

    @rule(
        SPECS["chunk-interval-as-token"],
        AS.m << Metrics(per_user_tokens_per_s=MATCH.rate, output_tokens=MATCH.tokens),
        NOT(Metrics(tokens_per_chunk=W())),
        TEST(lambda m, rate, tokens: counts_fewer_than_returned(m, rate, tokens)),
    )
    def rate_counts_fewer_than_the_output(self, m, rate, tokens):
        """One stream's rate over the whole of its request's latency counts fewer tokens than the request returned:
        no window of that request is longer, so the rate counted something there are fewer of than tokens (streamed
        chunks or events carrying several tokens each)."""
        latency = typical_ms(m, "request_latency")
        counted = rate * latency / 1e3
        return Finding(
            evidence=[ev("metrics.per_user_tokens_per_s", rate), ev("metrics.request_latency_ms", latency, "ms"),
                      ev("metrics.output_tokens", tokens)],
            detail=f"{rate:.4g} tokens/s over a whole {latency:.4g} ms request is {counted:.4g} tokens, yet each request "
            f"returned {tokens:g}: about {tokens / counted:.2g} tokens in each unit the rate counted.",
        )

    @rule(SPECS["chunk-interval-as-token"], AS.m << Metrics(tokens_per_chunk=MATCH.per_chunk), TEST(lambda per_chunk: per_chunk >= MULTI_TOKEN_CHUNKS))
    def multi_token_chunks(self, m, per_chunk):
        return Finding(evidence=[ev("metrics.tokens_per_chunk", per_chunk), *self.itl(m)])

    @rule(SPECS["chunk-interval-as-token"], AS.m << Metrics(), TEST(lambda m: chunk_and_token_ms(m) is not None))
    def itl_above_per_token(self, m):
        """The gap between a stream's chunks is longer than its time per token: with one token a chunk the median gap is
        the step's, as the median time per token is, so a chunk carries about their ratio in tokens (or the token count
        is inflated). Means are read only far apart: a mean over all gaps weighs the longest, stalled requests more than
        a mean of each request's time per token does."""
        itl_name, itl, tpot_name, tpot = chunk_and_token_ms(m)
        return Finding(evidence=[ev(f"metrics.{itl_name}", itl, "ms"), ev(tpot_name, tpot, "ms")],
                       detail=f"{itl / tpot:.3g} tokens' time between chunks.")

    @rule(
        SPECS["chunk-interval-as-token"],
        AS.m << Metrics(itl_p50_ms=MATCH.itl),
        Server(speculative=MATCH.method),
        NOT(Server(speculative_active=False)),
        NOT(Metrics(tokens_per_chunk=MATCH.per_chunk)),
        TEST(lambda m: not any(name.startswith("tpot_") for name in m)),
    )
    def itl_under_speculation(self, m, itl, method):
        """Under speculation a stream's gaps are a verify step's, several tokens apart. Not beside a TPOT: that counts
        the stream's tokens, so the per-token time the case is read by is not the gap between chunks."""
        return Finding(evidence=[ev("server.speculative", method), ev("metrics.itl_p50_ms", itl, "ms")])

    @rule(
        SPECS["chunk-interval-as-token"],
        AS.m << Metrics(boundary="client_receipt"),
        Expectation(boundary="engine"),
        Server(speculative=MATCH.method),
        NOT(Server(speculative_active=False)),
        NOT(Metrics(tokens_per_chunk=W())),
        TEST(lambda m: ("per_user_tokens_per_s" in m or "output_tokens_per_s" in m) and not decode_timed(m)),
    )
    def client_rate_under_speculation(self, m, method):
        """A client's rate held against the engine's own count while speculation emits several tokens a step,
        with no per-token time beside it: a client that counts streamed chunks (or events) counts steps, not
        tokens."""
        rate = "per_user_tokens_per_s" if "per_user_tokens_per_s" in m else "output_tokens_per_s"
        return Finding(evidence=[ev("server.speculative", method), ev("metrics.boundary", "client_receipt"), ev(f"metrics.{rate}", m[rate])])

    @rule(
        SPECS["chunk-interval-as-token"],
        AS.m << Metrics(boundary="client_receipt"),
        AS.e << Expectation(boundary="client_receipt", kind="other_config"),
        Server(speculative=MATCH.method),
        NOT(Server(speculative_active=False)),
        NOT(Metrics(tokens_per_chunk=W())),
        NOT(RunDiff(setting=W())),
        TEST(lambda m, e: not decode_timed(m) and chunk_counted(m, e)),
    )
    def one_client_reads_fewer_under_speculation(self, m, e, method):
        """Another client configuration read the same speculating load, and this one reads a chunk's worth fewer
        tokens per second: each chunk carries the tokens one verify step accepted, so a client that counts chunks
        (or events) counts steps. Another machine or version could be slower for its own reasons, so only a
        configuration reference counts; runs that differ in a setting of the server (speculation itself, its draft
        length, the graphs captured) did not serve the same stream, nor did runs of other work (a longer context, more
        streams), and the gap is theirs."""
        what, mine, theirs = same_load_rates(m, e)
        return Finding(
            evidence=[ev("server.speculative", method), ev(f"metrics.{what}", mine), ev(f"expected.{what}", theirs)],
            detail=f"The reference client reads {theirs / mine:.3g}x more tokens per second from the same kind of stream: about the "
            "tokens each verify step emits at once.",
        )

    @rule(
        SPECS["unknown-boundary"],
        Metrics(boundary="unknown"),
        OR(Expectation(kind=MATCH.kind), Bound(floor_ms=MATCH.kind)),
    )
    def unknown_boundary(self):
        return Finding(evidence=[ev("metrics.boundary", "unknown")])

    @rule(
        SPECS["unknown-boundary"],
        Metrics(boundary=MATCH.observed),
        Expectation(boundary=MATCH.expected),
        TEST(lambda observed, expected: boundaries_apart(observed, expected)),
    )
    def different_boundaries(self, observed, expected):
        return Finding(evidence=[ev("metrics.boundary", observed), ev("expected.boundary", expected)], key="differs")

    @rule(
        SPECS["budget-step-disagrees"],
        Budget(step_ms=MATCH.budget),
        OR(ObservedStep(ms=MATCH.observed, boundary="device_step"), Boundaries(device_step_ms=MATCH.observed)),
        TEST(lambda budget, observed: abs(budget - observed) > STEP_AGREEMENT * observed),
    )
    def budget_step_disagrees(self, budget, observed):
        return Finding(
            evidence=[ev("budget.step_ms", budget, "ms"), ev("observed_device_step_ms", observed, "ms")],
            detail=f"The budget's step is {budget / observed:.2f}x the device step observed for this workload.",
        )

    @rule(
        SPECS["client-timing-bursty"],
        AS.s << Stream(bursty=True),
        Boundaries(client_token_ms=MATCH.client),
        Metrics(boundary=P(engine_side), per_token_ms=MATCH.served),
        TEST(lambda client, served: disagree(client, served)),
    )
    def client_receipt_in_bursts(self, s, client, served):
        """The client's median inter-chunk interval per token, from a bursty stream, against the engine's per-token time."""
        return burst_finding(s, "boundaries.client_token_ms", "per-token interval", client, "the engine's", served)

    @rule(
        SPECS["client-timing-bursty"],
        AS.s << Stream(bursty=True),
        Boundaries(client_token_ms=MATCH.client),
        OR(Budget(step_ms=MATCH.served), Boundaries(device_step_ms=MATCH.served)),
        NOT(Server(speculative=P(speculating))),
        TEST(lambda client, served: disagree(client, served)),
    )
    def client_receipt_in_bursts_against_the_step(self, s, client, served):
        """Against the traced step, which is a token's time when each step makes one token (no speculation)."""
        return burst_finding(s, "boundaries.client_token_ms", "per-token interval", client, "the traced step", served)

    @rule(
        SPECS["client-timing-bursty"],
        AS.s << Stream(bursty=True),
        Metrics(boundary="client_receipt", itl_p50_ms=MATCH.client),
        OR(Budget(step_ms=MATCH.served), Boundaries(device_step_ms=MATCH.served)),
        NOT(Server(speculative=P(speculating))),
        TEST(lambda client, served: disagree(client, served)),
    )
    def client_itl_in_bursts(self, s, client, served):
        """A client-side median ITL from a bursty stream against the traced step."""
        return burst_finding(s, "metrics.itl_p50_ms", "median inter-token interval", client, "the traced step", served)

    @rule(
        SPECS["client-timing-bursty"],
        AS.m << Metrics(boundary="client_receipt", itl_p50_ms=MATCH.client),
        Bound(floor_ms=MATCH.floor),
        NOT(Server(speculative=P(speculating))),
        TEST(lambda m, client, floor: client < floor <= (stream_interval_ms(m) or 0.0)),
    )
    def client_itl_under_the_floor(self, m, client, floor):
        """A client's median gap shorter than the step's bytes could take, while the stream's own rate gives it more
        than that per token: most tokens reached the client together with the one before them, released in bursts
        (a proxy or a client buffer), so the median gap is the read pattern, not a step. A stream that stalls now and
        then (prefills in its steps) has its median at the step, above the floor, and stays out."""
        interval = stream_interval_ms(m)
        return Finding(
            evidence=[ev("metrics.itl_p50_ms", client, "ms"), ev("bound.floor_ms", floor, "ms"),
                      ev("metrics.stream_interval_ms", interval, "ms")],
            detail=f"The client's median gap is {client:.4g} ms, under the {floor:.4g} ms floor, while the stream's rate "
            f"gives {interval:.4g} ms a token.",
        )

    def flags(self, *names: str) -> list[str]:
        metrics = next(f for f in self.facts.values() if isinstance(f, Metrics))
        return [n for n in names if metrics.get(n) is True]

    def itl(self, m) -> list:
        return [ev(f"metrics.{n}", m[n], "ms") for n in ("itl_p50_ms", "itl_mean_ms") if n in m]
