"""Between the device and the user: output processing, transport, buffering, prefill interference.

Each boundary adds work the device bound ignores, so the three clocks (device step, server
emission, client receipt) are compared pairwise: the first boundary where the interval grows
is where the time goes.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    NOT,
    OR,
    P,
    TEST,
    W,
    Boundaries,
    ContextSweep,
    Expectation,
    Finding,
    Grade,
    Host,
    HostCostFact,
    Metrics,
    Reference,
    RuleSet,
    RunDiff,
    Server,
    StepMix,
    Stream,
    ev,
    load_specs,
    rule,
)

from diagnoser.rules.comparison import ablation, ablation_finding, larger
from diagnoser.rules import launch
from diagnoser.rules.context import SEQUENCE_REDONE, sweep_evidence
from diagnoser.rules.rates import beyond_batching, expected_rate, per_stream_rate, stream_rates

SPECS = load_specs(__file__)
# host-overhead is launch.py's; its one reading of a stream's stall lives beside the stall readings it excludes.
HOST_SPECS = launch.SPECS

# Intervals that differ by under 15-25 % are within streaming jitter.
SERVER_SLACK = 1.15
CLIENT_SLACK = 1.25
# Per-token host work that grows by 5 % of the step per 1k generated tokens is visible in long outputs.
GROWTH_SHARE = 0.05
# A p99/p50 inter-token ratio above 2.5 means regular stalls, not jitter.
SPIKE_RATIO = 2.5
# A client p99 gap of twice the server's emission interval, with the median on time, is
# chunks held and released in bursts: the stream's rate is intact, its smoothness is not.
BURST_RATIO = 2.0
# A stream's worst gap is a maximum over hundreds of intervals, so it needs a wider margin than
# the p99/p50 ratio: four steps is a prefill chunk's worth of work, not jitter or a late wake-up.
STALL_RATIO = 4.0
# Chunks a burst must hold before its gaps say something held them: a loaded reader on the real vLLM lab caught up
# 1.3-1.7 chunks at a time (2 cores, no proxy); nginx with gzip released 21-30. The canonical step's held bursts.
HELD_BURST_CHUNKS = 4
# Near-zero gaps beyond the client's own stalled share that say chunks were held on the way. Measured on the real
# vLLM on 2 cores: healthy, 12.6 % of gaps near zero with the client stalled 11.5 % of the load; nginx buffering,
# 97 % against 49 %; long prompts without a proxy, 35 % against 99 % (the client barely ran).
HELD_BEYOND_CLIENT = 0.25
# A mixed step twice the decode-only step holds a prefill as long as a whole decode step, which every
# decoding stream waits out as one long gap. The real server's 2000-token prompts made 30-190 ms mixed
# steps against a 2.35 ms decode step (13-80x); a short prompt beside the decodes adds a fraction of a step.
MIXED_STEP_RATIO = 2.0
# A stream that stopped for fifty of its steps at once, with nothing said about how prefill is scheduled:
# no per-step jitter, wake-up or collector pause on a loaded host comes near it (the loaded 2-core box's
# worst gaps were 5-15 steps, healthy, under two CPU burners), while one long prompt's prefill (or a preempted sequence's
# recompute, which is a prefill) is thousands of tokens of work done between two decode steps.
LONE_STALL_RATIO = 50.0
# A stream that stopped for twenty of its steps while requests carrying images, audio or video were in flight: beyond
# the 5-15 steps a loaded healthy host's worst gap reached, and about what one image's encoder and the prefill of its
# hundreds to thousands of tokens take between two decode steps.
MEDIA_STALL_RATIO = 20.0
# What the mixed steps add to every step the streams decode, averaged over the trace's decode and mixed steps:
# a tenth of the step is beyond run-to-run noise. A healthy server admitting a few short prompts added 5 %
# (two 94-token prefills among 51 steps); a 2000-token prompt every half second adds several steps' worth.
MIXED_SHARE = 0.1


def mixed_extra_ms(mixed_steps: int, decode_steps: int, decode: float, mixed: float) -> float:
    """The mixed steps' extra time spread over all the steps a stream decodes through: the mean cost per step."""
    return (mixed - decode) * mixed_steps / max(1, mixed_steps + decode_steps)


def prefill_only_extra_ms(prefill_steps: int, decode_steps: int, prefill_ms: float) -> float:
    """Steps that only prefilled, spread over the decode steps: a stream in flight waits out each whole one and gets
    no token from it, so each of its tokens costs this much more on average."""
    return prefill_steps * prefill_ms / max(1, decode_steps)


def shortest_prefilling_ms(x) -> float:
    """The typical step that prefilled beside decodes (a chunk), else the longest prefill step."""
    return x.get("mixed_step_ms") or x["longest_prefill_step_ms"]


# Prompts this long fill at least a whole prefill chunk at common token budgets per step.
LONG_PROMPT_TOKENS = 1000
# Prompt tokens arriving per step at which prefill is a step's main work: a prefill token costs a decode token's
# FLOPs, and this many beside the decodes make the step compute-bound on them.
ARRIVING_PREFILL_TOKENS = 512
# A served time per token this many times the device's decode step is the step doing other work, not jitter.
PREFILL_SLOWDOWN = 2.0


def arriving_prompt_tokens(rps: float, prompt: float, per_token_ms: float) -> float:
    """Prompt tokens that arrive, on average, during one step: each must be prefilled in some step."""
    return rps * prompt * per_token_ms / 1e3
# A tail gap within a factor of two of the steps that prefilled (from a chunk beside the decodes to the longest
# prefill) is those steps': other stalls (a late wake-up, a collector pause) have no reason to come out the length
# of a prefill. The real vLLM's 2000-token prompts: a p99 of 24 ms between 9.7 ms chunks and a 203 ms prefill.
PREFILL_STEP_MATCH = 0.5
# Adding decode streams adds only their KV reads to a step that already reads every weight, so the aggregate
# output rate rises (memory-bound) or holds (compute-bound); a fall of a quarter with more streams is beyond
# batching's own overheads and run-to-run spread: the added streams brought other work into the steps.
FEWER_TOKENS_WITH_MORE_STREAMS = 1.25
# A stall of five seconds is longer than any decode step of a served model (the slowest, layers on a CPU,
# run at about one token a second): only seconds of other work between two steps make it.
LONE_STALL_MS = 5000.0
# Steps that only prefill, a tenth of all steps while streams decode: every decoding stream sits out each of them,
# so its per-token time is at least a ninth longer than the decode steps alone; a few per cent is the odd
# arrival's prefill (a healthy real server: 1 prefill-only step among 49).
PREFILL_STEP_SHARE = 0.1
# A prefill-only step holds up decoding only when another stream is in flight beside the one prefilling.
OTHER_STREAMS = 2
# What a penalty cost that scans the history grows with.
HISTORY_GROWTH = frozenset({"output_length", "context"})


# A stall with nothing said of how prefill is scheduled, and tokens not held on the way (bursts: made on time,
# held after): the patterns of the lone-stall rules.
UNEXPLAINED_STALL = (NOT(Host(prefill_interleaved=W())), NOT(Server(prefill_priority=W())), NOT(StepMix()), NOT(Stream(bursty=True)))
# One request in flight: no other prompt is there to be prefilled between its tokens (its own prefill comes before its
# first token), so a long stall inside its stream is the host or the engine stopping, not prefill.
ONE_STREAM = Metrics(concurrency=1)


def lone_stall() -> tuple:
    """Patterns for a stream stopped for LONE_STALL_RATIO of its steps at once, unexplained (``UNEXPLAINED_STALL``).
    Binds ``stall`` and ``step``; whether other streams were in flight decides whose reading it is."""
    return (Stream(worst_stall_ms=MATCH.stall), Reference(step_ms=MATCH.step), *UNEXPLAINED_STALL,
            TEST(lambda stall, step: stall >= LONE_STALL_RATIO * step))


def stall_evidence(stall: float, step: float) -> list:
    return [ev("stream.worst_stall_ms", stall, "ms"), ev("reference.step_ms", step, "ms")]


def stopped_for(stall: float, step: float) -> str:
    return f"stopped for {stall / step:.0f} of its steps at once ({stall - step:.4g} ms lost)"


def steady_step_ms(e) -> float | None:
    """One stream's time per token at the reference's rate."""
    rate = per_stream_rate(e, expected_rate(e))
    return 1e3 / rate if rate else None


def penalties_on(s) -> bool:
    return s.get("repetition_penalty") is True or s.get("penalties") is True


def served_with_penalties(d) -> bool:
    """The baseline run (the server as it serves) has the penalties on and the other run takes them off: the
    penalties are the server's standing configuration, not a change someone made to the requests."""
    return d["before"] == "true"


def _penalty_flags(s) -> list:
    return [ev(f"server.{n}", True) for n in ("repetition_penalty", "penalties") if s.get(n) is True]

# Server and client intervals are compared per token (per chunk / tokens per chunk), so chunked
# streaming is not mistaken for slow output; see Boundaries in diagnoser.engine.facts.


class OutputPathRules(RuleSet):
    @rule(SPECS["penalty-over-history"], *ablation("penalties"), TEST(lambda d: not served_with_penalties(d)))
    def penalties_measured(self, d, parent_cap_ms):
        """Penalties added to a baseline without them: the delta is the penalties' cost."""
        return ablation_finding(d)

    @rule(
        SPECS["penalty-over-history"],
        *ablation("penalties"),
        NOT(Server(penalties=True)),
        NOT(Server(repetition_penalty=True)),
        TEST(lambda d: served_with_penalties(d)),
    )
    def penalties_removed_measured(self, d, parent_cap_ms):
        """Penalties taken off a baseline that had them, with no server setting known to turn them on."""
        return ablation_finding(d)

    @rule(
        SPECS["default-penalties"],
        AS.s << Server(),
        *ablation("penalties"),
        TEST(lambda s, d: penalties_on(s) and served_with_penalties(d)),
    )
    def default_penalties_measured(self, s, d):
        """The server as it serves (the baseline) has its penalties on; the same request with them overridden to
        neutral is the change: the delta is what every request pays."""
        return ablation_finding(d, *_penalty_flags(s))

    @rule(
        SPECS["default-penalties"],
        AS.s << Server(),
        NOT(RunDiff(setting="penalties")),
        TEST(lambda s: penalties_on(s)),
    )
    def default_penalties_configured(self, s):
        """The server's own settings put the penalty pass into every request: a cost known to exist, named
        before it is timed; the A/B with the penalties neutral (the check) measures it."""
        return Finding(evidence=_penalty_flags(s), grade=Grade.indicated,
                       detail="The server's settings turn penalties on for every request; not yet timed against neutral penalties.")

    @rule(
        SPECS["client-gap"],
        AS.b << Boundaries(device_step_ms=MATCH.device, client_token_ms=MATCH.client),
        TEST(lambda client, device: client >= CLIENT_SLACK * device),
    )
    def client_gap(self, b, device, client):
        return Finding(
            evidence=[ev("boundaries.device_step_ms", device, "ms"), *_per_token(b, "client_receipt_ms", client)],
            removable_ms=client - device,
            step_ms=client,
            detail="Gains are shares of the client's interval per token.",
        )

    @rule(
        SPECS["client-gap"],
        AS.b << Boundaries(device_step_ms=MATCH.device, client_p99_token_ms=MATCH.p99),
        NOT(Stream(near_zero_gap_fraction=W())),
        TEST(lambda b, p99, device: tail_gap_held(b, device, p99)),
    )
    def client_gap_in_the_tail(self, b, device, p99):
        """A long p99 against the median step is a gap on the way out only if chunks were held
        after emission; measured and short, the tail is the server's own slow steps. What the
        measuring client's own host delayed is neither."""
        return tail_gap_finding(b, device, p99)

    @rule(
        SPECS["client-gap"],
        AS.b << Boundaries(device_step_ms=MATCH.device, client_p99_token_ms=MATCH.p99),
        AS.s << Stream(near_zero_gap_fraction=W()),
        TEST(lambda b, s, p99, device: tail_gap_held(b, device, p99) and not bunching_is_the_clients(s, b)),
    )
    def client_gap_in_the_tail_beyond_the_clients_own(self, b, s, device, p99):
        """As above, where the stream's near-zero gaps were counted: a tail the client's own stalls bunched is its own."""
        return tail_gap_finding(b, device, p99, *_held_evidence(s, b))

    @rule(
        SPECS["server-output-processing"],
        AS.b << Boundaries(device_step_ms=MATCH.device, server_token_ms=MATCH.server),
        TEST(lambda server, device: server >= SERVER_SLACK * device),
    )
    def server_output_processing(self, b, device, server):
        return Finding(
            evidence=[ev("boundaries.device_step_ms", device, "ms"), *_per_token(b, "server_emission_ms", server)],
            removable_ms=server - device,
            step_ms=server,
        )

    @rule(SPECS["server-output-processing"], Server(tokenizer_fast=False))
    def slow_tokenizer(self, parent_cap_ms):
        """A pure-Python tokenizer detokenizes every stream's token on the server's output path; at many
        streams it falls behind the device. Under a measured client gap it takes that gap."""
        return Finding(evidence=[ev("server.tokenizer_fast", False)], removable_ms=parent_cap_ms)

    @rule(SPECS["proxy-buffering"], *ablation("proxy"))
    def through_the_proxy_slower(self, d):
        """The same load through a proxy or gateway and straight to the server: the delta is what the proxy
        costs, its buffering or its own queue, since the server is the same."""
        return ablation_finding(d)

    @rule(
        SPECS["proxy-buffering"],
        AS.b << Boundaries(server_token_ms=MATCH.server, client_token_ms=MATCH.client),
        TEST(lambda b, client, server: client >= CLIENT_SLACK * server and client_could_run(b)),
    )
    def proxy_buffering(self, b, server, client):
        evidence = [*_per_token(b, "server_emission_ms", server), *_per_token(b, "client_receipt_ms", client)]
        return Finding(evidence=evidence, removable_ms=client - server, step_ms=client)

    @rule(
        SPECS["proxy-buffering"],
        AS.b << Boundaries(server_emission_ms=MATCH.server, client_p99_ms=MATCH.p99),
        NOT(Stream(near_zero_gap_fraction=W())),
        TEST(lambda b, p99, server: tail_gap_held(b, server, p99) and client_could_run(b)),
    )
    def proxy_bursts(self, b, server, p99):
        """A long client p99 is buffering only if chunks wait after emission; when the server's
        emission-to-receipt lag was measured, that lag bounds it (a server whose own intervals
        grow has a long p99 too, with nothing held). The delay the client's own host adds is
        not the proxy's."""
        return proxy_tail_finding(b, server, p99)

    @rule(
        SPECS["proxy-buffering"],
        AS.b << Boundaries(server_emission_ms=MATCH.server, client_p99_ms=MATCH.p99),
        AS.s << Stream(near_zero_gap_fraction=W()),
        TEST(lambda b, s, p99, server: tail_gap_held(b, server, p99) and client_could_run(b) and not bunching_is_the_clients(s, b)),
    )
    def proxy_bursts_beyond_the_clients_own(self, b, s, server, p99):
        """As above, where the stream's near-zero gaps were counted: a tail the client's own stalls bunched is its own."""
        return proxy_tail_finding(b, server, p99, *_held_evidence(s, b))

    @rule(
        SPECS["proxy-buffering"],
        AS.s << Stream(bursty=True, tokens_per_burst=MATCH.per_burst),
        AS.b << Boundaries(server_emission_ms=MATCH.server),
        NOT(Server(speculative=W())),
        TEST(lambda s, b, per_burst: per_burst / (b.get("tokens_per_chunk") or 1.0) >= HELD_BURST_CHUNKS and held_on_the_way(s, b)),
    )
    def bursts_of_held_tokens(self, s, b, per_burst, server):
        """Tokens made one step apart reach the client many at a time: each burst's tokens waited, the first of them
        for the whole burst's worth of steps. The client's p99 gap misses that when bursts are long (most gaps are
        then near zero); the burst's length at the server's cadence is the wait the user sees before each burst.
        A reader that cannot run reads what arrived meanwhile at once, so the share of the load it was kept waiting
        is a share of near-zero gaps of its own making; only bursts beyond it were held on the way, unless the stream
        came compressed: then a compressor held them whatever the client did."""
        held = (per_burst - 1) * server
        return Finding(
            evidence=[ev("stream.tokens_per_burst", per_burst), ev("boundaries.server_emission_ms", server, "ms"), *_held_evidence(s, b)],
            removable_ms=held,
            step_ms=per_burst * server,
            on_top=True,
            detail=f"{per_burst:.3g} tokens a burst at {server:.3g} ms a token: the first waits {held:.3g} ms for the rest; "
            "the gain is on that wait before each burst, not on the rate.",
        )

    @rule(SPECS["proxy-buffering"], AS.s << Stream(bursty=True), NOT(Server(speculative=W())), NOT(Boundaries(client_stalled_share=W())))
    def stream_arrives_in_bursts(self, s, parent_cap_ms):
        """Tokens reach the client in bursts with one token per step made: something between the
        producer and the client holds them. Without the server's emission times it could be either."""
        return bursts_finding(s, parent_cap_ms)

    @rule(
        SPECS["proxy-buffering"],
        AS.s << Stream(bursty=True),
        AS.b << Boundaries(client_stalled_share=W()),
        NOT(Server(speculative=W())),
        TEST(lambda s, b: held_on_the_way(s, b)),
    )
    def bursts_beyond_the_clients_own(self, s, b, parent_cap_ms):
        """As above, where the client's own stalls were measured and account for fewer of the near-zero gaps than were
        seen: a healthy real vLLM on a busy box gave 36 % of gaps near zero while its client was kept waiting 68 % of
        the load, bursts of the client's own making."""
        return bursts_finding(s, parent_cap_ms)

    @rule(
        SPECS["output-length-growth"],
        Boundaries(itl_growth_ms_per_1k_output=MATCH.growth),
        Reference(step_ms=MATCH.step),
        NOT(ContextSweep(growth=W())),
        TEST(lambda growth, step: SEQUENCE_REDONE * step > growth >= GROWTH_SHARE * step),
    )
    def output_length_growth(self, growth, step):
        """Below the slope of a sequence redone every step (``long-context-slowdown``), which no host work reaches."""
        return Finding(
            evidence=[ev("boundaries.itl_growth_ms_per_1k_output", growth, "ms"), ev("reference.step_ms", step, "ms")],
            removable_ms=growth,
            step_ms=step + growth,
            detail="Gain shown for a step 1k tokens into the output; no context sweep says how much of the slope "
            "the growing KV cache alone explains.",
        )

    @rule(
        SPECS["output-length-growth"],
        Boundaries(itl_growth_ms_per_1k_output=MATCH.growth),
        Reference(step_ms=MATCH.step),
        AS.s << ContextSweep(growth=W()),
        TEST(lambda growth, step, s: growth - context_slope_per_1k(s) >= GROWTH_SHARE * step),
    )
    def output_length_growth_beyond_context(self, growth, step, s):
        """Every generated token also lengthens the context, so part of the slope is KV and
        attention work; the context sweep measures that part, and only the rest is history-wide
        host work."""
        kv = max(0.0, context_slope_per_1k(s))
        return Finding(
            evidence=[ev("boundaries.itl_growth_ms_per_1k_output", growth, "ms"), *sweep_evidence(s), ev("reference.step_ms", step, "ms")],
            removable_ms=growth - kv,
            step_ms=step + growth,
            detail=f"Gain shown for a step 1k tokens into the output: the slope less the {kv:.3g} ms per 1k tokens "
            "the context sweep shows for a longer context alone.",
        )

    @rule(
        SPECS["output-length-growth"],
        Metrics(per_token_grows_with=P(lambda g: "output_length" in g)),
        NOT(Boundaries(itl_growth_ms_per_1k_output=W())),
    )
    def reported_output_growth(self):
        """The per-token time was seen to rise as the output grows, with no slope to size it: indicated. The
        growing context rises with it, so the KV cache's share is the context sweep's to say."""
        return Finding(evidence=[ev("metrics.per_token_grows_with", "output_length")],
                       detail="No slope of the time per token against tokens generated sizes the growth yet.")

    @rule(
        SPECS["penalty-over-history"],
        AS.s << Server(),
        NOT(HostCostFact(name="penalties", grows_with=P(lambda g: bool(HISTORY_GROWTH & set(g))))),
        TEST(lambda s: penalties_on(s)),
    )
    def penalty_over_history(self, s, parent_cap_ms):
        """Under a measured growth the flag takes the parent's time; alone it is only possible (penalties are common)."""
        if parent_cap_ms is not None:
            return Finding(evidence=_penalty_flags(s), removable_ms=parent_cap_ms)
        return Finding(evidence=_penalty_flags(s), grade=Grade.possible, detail="Penalties are on; nothing shows yet that they grow the step.")

    @rule(
        SPECS["penalty-over-history"],
        AS.c << HostCostFact(name="penalties", grows_with=P(lambda g: bool(HISTORY_GROWTH & set(g)))),
    )
    def penalty_cost_over_history(self, c, parent_cap_ms):
        """A penalties cost that grows with the history: its measured time, else the parent's, else indicated."""
        evidence = [ev("host_costs[penalties].grows_with", ", ".join(c["grows_with"]))]
        measured = c.get("measured", True) and "ms_per_step" in c
        if measured:
            evidence.append(ev("host_costs[penalties].ms_per_step", c["ms_per_step"], "ms"))
        return Finding(evidence=evidence, removable_ms=c["ms_per_step"] if measured else parent_cap_ms)

    @rule(
        SPECS["prefill-stalls"],
        Host(itl_spike_ratio=MATCH.ratio, prefill_interleaved=True),
        Reference(step_ms=MATCH.step),
        TEST(lambda ratio: ratio >= SPIKE_RATIO),
    )
    def prefill_stalls(self, ratio, step):
        return Finding(
            evidence=[ev("host.itl_spike_ratio", ratio), ev("host.prefill_interleaved", True)],
            removable_ms=step * (ratio - 1),
            step_ms=step * ratio,
            on_top=True,
            detail="The gain is on the spiking interval the ratio was read from (the p99, or the mean where no p99 was "
            "given), not on the median step.",
        )

    @rule(
        SPECS["prefill-stalls"],
        Metrics(requests_per_s=MATCH.rps, input_tokens=MATCH.prompt, per_token_ms=MATCH.per_token),
        AS.e << Expectation(boundary="device_step"),
        TEST(lambda e, rps, prompt, per_token: arriving_prompt_tokens(rps, prompt, per_token) >= ARRIVING_PREFILL_TOKENS
             and per_token >= PREFILL_SLOWDOWN * (steady_step_ms(e) or per_token)),
    )
    def prompts_arriving_every_step(self, e, rps, prompt, per_token):
        """A served load whose prompts arrive faster than decode can hide them: every step has its share of them to
        prefill (chunked beside the decodes, or in steps of their own), so the time per token is the decode step plus
        that prefill. Against the device's decode-only step the excess is the prefill's; indicated, as queueing for a
        batch slot also lengthens the served time, and a trace's step split measures it."""
        step = steady_step_ms(e)
        arriving = arriving_prompt_tokens(rps, prompt, per_token)
        return Finding(
            evidence=[ev("metrics.requests_per_s", rps), ev("metrics.input_tokens", prompt), ev("metrics.per_token_ms", per_token, "ms"),
                      ev("expected.per_token_ms", step, "ms"), ev("prompt_tokens_per_step", arriving)],
            grade=Grade.indicated,
            detail=f"About {arriving:.0f} prompt tokens arrive during each {per_token:.4g} ms token, {per_token / step:.3g}x "
            f"the {step:.4g} ms decode step.",
        )

    @rule(
        SPECS["prefill-stalls"],
        Host(itl_spike_ratio=MATCH.ratio),
        NOT(Host(prefill_interleaved=W())),
        Server(chunked_prefill=True),
        Metrics(input_tokens=MATCH.prompt),
        TEST(lambda ratio, prompt: ratio >= SPIKE_RATIO and prompt >= LONG_PROMPT_TOKENS),
    )
    def long_prompts_under_chunked_prefill(self, ratio, prompt):
        """Long prompts admitted while streams decode, chunked prefill on, and a long inter-token tail: the
        chunks join decode steps. Nothing yet shows the long steps were the ones holding chunks: indicated."""
        return Finding(
            evidence=[ev("host.itl_spike_ratio", ratio), ev("server.chunked_prefill", True), ev("metrics.input_tokens", prompt)],
            grade=Grade.indicated,
            detail=f"Prompts of {prompt:.0f} tokens are prefilled in chunks beside the decodes; the p99 gap is {ratio:.3g}x "
            "the median. A trace's step split (mixed against decode-only steps) would measure it.",
        )

    @rule(
        SPECS["prefill-stalls"],
        Host(itl_spike_ratio=MATCH.ratio),
        NOT(Host(prefill_interleaved=W())),
        NOT(Server(chunked_prefill=True)),
        Metrics(input_tokens=MATCH.prompt, requests_per_s=MATCH.rps, concurrency=MATCH.streams),
        TEST(lambda ratio, prompt, rps, streams: ratio >= SPIKE_RATIO and prompt >= LONG_PROMPT_TOKENS and rps > 0 and streams > 1),
    )
    def long_prompts_arriving_while_streams_decode(self, ratio, prompt, rps, streams):
        """A served load keeps admitting long prompts while other streams decode, and a long inter-token tail: every
        prompt is prefilled on the device the decodes run on, in their steps (chunked) or in steps of its own, so some
        gaps hold a prefill. Whichever way it is scheduled, it is indicated, as above."""
        return Finding(
            evidence=[ev("host.itl_spike_ratio", ratio), ev("metrics.input_tokens", prompt), ev("metrics.requests_per_s", rps),
                      ev("metrics.concurrency", streams)],
            grade=Grade.indicated,
            detail=f"Prompts of {prompt:.0f} tokens arrive {rps:.3g} a second among {streams:g} streams in flight; the worst gap "
            f"is {ratio:.3g}x the median. A trace's step split (steps holding prefill against decode-only steps) would measure it.",
        )

    @rule(
        SPECS["prefill-stalls"],
        Host(prefill_interleaved=True),
        NOT(Host(itl_spike_ratio=W())),
        Stream(worst_stall_ms=MATCH.stall),
        Reference(step_ms=MATCH.step),
        TEST(lambda stall, step: stall >= STALL_RATIO * step),
    )
    def interleaved_prefill_stall(self, stall, step):
        """Prefill runs in the decode steps and a stream's worst gap is several steps long: the gain is on that
        stall, like a spike ratio's when only the worst gap was recorded."""
        return Finding(
            evidence=[ev("host.prefill_interleaved", True), *stall_evidence(stall, step)],
            removable_ms=stall - step,
            step_ms=stall,
            on_top=True,
            detail="The gain is on the worst stall a stream saw, not on the median step.",
        )

    @rule(
        SPECS["prefill-stalls"],
        Server(prefill_priority=True),
        Stream(worst_stall_ms=MATCH.stall),
        Reference(step_ms=MATCH.step),
        TEST(lambda stall, step: stall >= STALL_RATIO * step),
    )
    def prefill_first_stalls(self, stall, step):
        return Finding(
            evidence=[ev("server.prefill_priority", True), *stall_evidence(stall, step)],
            removable_ms=stall - step,
            step_ms=stall,
            on_top=True,
            detail="Prefill runs before any decode: the gain is on the worst stall a stream saw, not on the median step.",
        )

    @rule(
        SPECS["prefill-stalls"],
        StepMix(prefill_steps=MATCH.prefills, decode_steps=MATCH.decodes),
        NOT(Server(prefill_priority=True)),
        Stream(worst_stall_ms=MATCH.stall),
        Reference(step_ms=MATCH.step),
        TEST(lambda prefills, decodes, stall, step: prefills > 0 and decodes > 0 and stall >= STALL_RATIO * step),
    )
    def prefill_steps_between_decodes(self, prefills, decodes, stall, step):
        """Steps that only prefilled among the decode steps, and a stream that stalled for several steps: the
        decodes waited out whole prefill steps, as with prefill scheduled first. Which gap was which is not
        aligned yet: indicated."""
        return Finding(
            evidence=[ev("step_mix.prefill_steps", prefills), ev("step_mix.decode_steps", decodes),
                      *stall_evidence(stall, step)],
            grade=Grade.indicated,
            detail=f"{prefills} prefill-only steps ran among {decodes} decode steps and a stream stalled {stall / step:.3g} steps long; "
            "inter-token gaps aligned with the prefill steps would measure it.",
        )

    @rule(
        SPECS["prefill-stalls"],
        AS.x << StepMix(mixed_steps=MATCH.mixed_steps, decode_steps=MATCH.decode_steps, decode_step_ms=MATCH.decode,
                        mixed_step_ms=MATCH.mixed),
        TEST(lambda mixed_steps, decode_steps, decode, mixed: mixed_steps > 0 and mixed >= MIXED_STEP_RATIO * decode
             and mixed_extra_ms(mixed_steps, decode_steps, decode, mixed) >= MIXED_SHARE * decode),
    )
    def prefill_in_mixed_steps(self, x, mixed_steps, decode_steps, decode, mixed):
        """Steps that prefill beside running decodes, against the decode-only steps of the same trace: each
        decoding stream waits the difference once per mixed step, which over the trace is the extra per step."""
        evidence = [ev("step_mix.mixed_steps", mixed_steps), ev("step_mix.decode_steps", x.get("decode_steps", 0)),
                    ev("step_mix.mixed_step_ms", mixed, "ms"), ev("step_mix.decode_step_ms", decode, "ms")]
        if "prefill_tokens_per_mixed_step" in x:
            evidence.append(ev("step_mix.prefill_tokens_per_mixed_step", x["prefill_tokens_per_mixed_step"]))
        extra = mixed_extra_ms(mixed_steps, decode_steps, decode, mixed)
        return Finding(
            evidence=evidence,
            removable_ms=extra,
            step_ms=decode + extra,
            on_top=True,
            detail=f"{mixed_steps} of {mixed_steps + decode_steps} steps prefilled beside running decodes and took {mixed / decode:.3g}x "
            f"a decode-only step: {extra:.3g} ms on every step on average, and a {mixed - decode:.3g} ms stall each time.",
        )

    @rule(
        SPECS["prefill-stalls"],
        StepMix(prefill_steps=MATCH.prefills, decode_steps=MATCH.decodes, prefill_step_ms=MATCH.prefill, decode_step_ms=MATCH.decode),
        Metrics(concurrency=MATCH.streams),
        TEST(lambda prefills, decodes, prefill, decode, streams: streams >= OTHER_STREAMS and decodes > 0
             and prefill_only_extra_ms(prefills, decodes, prefill) >= MIXED_SHARE * decode),
    )
    def prefill_only_steps_timed(self, prefills, decodes, prefill, decode, streams):
        """Steps that only prefilled while streams were in flight, timed: what they add to every decode step is their
        time, not their count (four 33 ms prefills among 252 steps of 3.3 ms are 2 % of the steps and a sixth of the
        time). The same share of the step as the mixed steps' (MIXED_SHARE) is beyond run-to-run noise."""
        extra = prefill_only_extra_ms(prefills, decodes, prefill)
        return Finding(
            evidence=[ev("step_mix.prefill_steps", prefills), ev("step_mix.prefill_step_ms", prefill, "ms"),
                      ev("step_mix.decode_steps", decodes), ev("step_mix.decode_step_ms", decode, "ms"), ev("metrics.concurrency", streams)],
            removable_ms=extra,
            step_ms=decode + extra,
            on_top=True,
            detail=f"{prefills} steps of about {prefill:.3g} ms only prefilled among {decodes} decode steps of {decode:.3g} ms, "
            f"while {streams:g} streams were in flight: {extra:.3g} ms on every token on average.",
        )

    @rule(
        SPECS["prefill-stalls"],
        StepMix(decode_step_ms=MATCH.decode, mixed_step_ms=MATCH.mixed),
        NOT(StepMix(mixed_steps=P(lambda n: n > 0))),
        TEST(lambda decode, mixed: mixed >= MIXED_STEP_RATIO * decode),
    )
    def mixed_steps_uncounted(self, decode, mixed):
        """A step that prefilled beside running decodes against a decode-only step, with no count of how many steps
        mixed: every decoding stream waits the difference at each one, so the stall is measured, its share of the
        run is not (how often prompts arrive sets it)."""
        return Finding(
            evidence=[ev("step_mix.mixed_step_ms", mixed, "ms"), ev("step_mix.decode_step_ms", decode, "ms")],
            missing=["step_mix.mixed_steps", "step_mix.decode_steps"],
            detail=f"A step that prefilled beside the decodes took {mixed / decode:.3g}x a decode-only step: every decoding "
            f"stream stalls {mixed - decode:.3g} ms each time one runs.",
        )

    @rule(
        SPECS["prefill-stalls"],
        Metrics(itl_p99_ms=MATCH.tail),
        AS.x << StepMix(decode_step_ms=MATCH.decode, longest_prefill_step_ms=MATCH.longest, longest_prefill_tokens=MATCH.prompt),
        TEST(lambda x, tail, decode, longest, prompt: prompt >= LONG_PROMPT_TOKENS and tail >= STALL_RATIO * decode
             and longest >= STALL_RATIO * decode and PREFILL_STEP_MATCH * shortest_prefilling_ms(x) <= tail <= longest / PREFILL_STEP_MATCH),
    )
    def tail_as_long_as_prefill_steps(self, x, tail, decode, longest, prompt):
        """The engine's own p99 gap between a stream's tokens is as long as the steps that prefilled a long prompt (from
        the chunks that joined decode steps to the longest prefill): decoding streams waited out other requests'
        prefills. The trace's window may hold few of those steps (they come and go with arrivals); the server's
        histogram covers the whole load."""
        mixed = x.get("mixed_step_ms")
        return Finding(
            evidence=[ev("metrics.itl_p99_ms", tail, "ms"), ev("step_mix.decode_step_ms", decode, "ms"),
                      *([ev("step_mix.mixed_step_ms", mixed, "ms")] if mixed else []),
                      ev("step_mix.longest_prefill_step_ms", longest, "ms"), ev("step_mix.longest_prefill_tokens", prompt)],
            removable_ms=tail - decode,
            step_ms=tail,
            on_top=True,
            detail=f"The p99 gap ({tail:.3g} ms) is {tail / decode:.3g} decode steps long, within the steps that prefilled "
            + (f"({mixed:.3g} ms for a chunk beside the decodes, " if mixed else "(")
            + f"{longest:.3g} ms for the {prompt}-token prefill); the gain is on that tail, not on the median step.",
        )

    @rule(
        SPECS["prefill-stalls"],
        Server(multimodal=True),
        Stream(worst_stall_ms=MATCH.stall),
        Reference(step_ms=MATCH.step),
        Metrics(concurrency=MATCH.streams),
        NOT(Stream(bursty=True)),
        NOT(Server(prefill_priority=W())),
        TEST(lambda stall, step, streams: streams >= OTHER_STREAMS and stall >= MEDIA_STALL_RATIO * step),
    )
    def media_encoded_between_decode_steps(self, stall, step, streams):
        """Requests that carry images, audio or video run their encoder and then prefill the media's tokens on the
        device the other streams decode on, between two of their steps: a stream in flight beside such a request
        waits out the whole of that work as one gap. Indicated: the gaps aligned with media arrivals (or a trace's
        encoder and prefill steps) would measure it."""
        return Finding(
            evidence=[ev("server.multimodal", True), *stall_evidence(stall, step),
                      ev("metrics.concurrency", streams)],
            grade=Grade.indicated,
            detail=f"A stream stalled {stall / step:.3g} steps long while {streams:g} requests, some carrying media, were in flight.",
        )

    @rule(SPECS["prefill-stalls"], *lone_stall(), NOT(Host(itl_spike_ratio=W())), NOT(ONE_STREAM))
    def lone_long_stall(self, stall, step):
        """A decode step's work barely changes from one step to the next; the work that takes dozens of steps'
        time inside a serving loop is a long prefill run between two of them. Not when the tokens came in
        bursts: then they were made on time and held on the way, and the stall is the holding. Nothing in the case says how
        prefill is scheduled, so the stall only makes it possible, and claims no time until it is lined up
        with a prefill."""
        return Finding(
            evidence=stall_evidence(stall, step),
            grade=Grade.possible,
            detail=f"A stream {stopped_for(stall, step)}. Whether a "
            "prompt was being prefilled then (server log lines, /metrics prompt tokens over the stall, or a trace's step "
            "split) would settle it and bound the gain.",
        )

    @rule(
        SPECS["prefill-stalls"],
        Stream(worst_stall_ms=MATCH.stall),
        Reference(step_ms=MATCH.step),
        AS.e << Expectation(),
        NOT(Host(itl_spike_ratio=W())),
        *UNEXPLAINED_STALL,
        NOT(ONE_STREAM),
        TEST(lambda stall, step: stall < LONE_STALL_RATIO * step),
    )
    def long_stall_against_the_steady_step(self, e, stall, step):
        """A rate read while the stream stalled averages the stalls in, so its step says little of a step's work;
        the same stream's rate without them (the reference) does: a stall of fifty such steps is other work
        between two of them, as with a lone long stall."""
        steady = steady_step_ms(e) or step
        if stall < LONE_STALL_RATIO * steady:
            return None
        return Finding(
            evidence=[ev("stream.worst_stall_ms", stall, "ms"), ev("expected.per_stream_tokens_per_s", 1e3 / steady),
                      ev("reference.step_ms", step, "ms")],
            grade=Grade.possible,
            detail=f"A stream stopped for {stall / steady:.0f} of the steps it takes without the stall. Whether a prompt was "
            "being prefilled then would settle it and bound the gain.",
        )

    @rule(
        SPECS["prefill-stalls"],
        Stream(worst_stall_ms=MATCH.stall),
        NOT(Reference(step_ms=W())),
        *UNEXPLAINED_STALL,
        NOT(ONE_STREAM),
        TEST(lambda stall: stall >= LONE_STALL_MS),
    )
    def stall_of_seconds(self, stall):
        """With no per-token time to count it in steps, a stall of seconds is still longer than any decode step
        of a served model: between two steps something did seconds of work, and a long prompt's prefill (or a
        preempted sequence's recompute) is what does. Possible, as a lone stall is."""
        return Finding(
            evidence=[ev("stream.worst_stall_ms", stall, "ms")],
            grade=Grade.possible,
            detail=f"A stream stopped for {stall / 1e3:.3g} s at once. Whether a prompt was being prefilled then would settle it.",
        )

    @rule(HOST_SPECS["host-overhead"], *lone_stall(), ONE_STREAM)
    def lone_stream_stopped(self, stall, step):
        """One request alone stopped for dozens of its steps at once. No other prompt was in flight to be prefilled
        between its tokens, and a decode step's work barely changes from one to the next, so the pause is the host
        loop not running the next step: a garbage-collection pass over a large heap, memory paged out, a blocking
        write or another process holding the CPU. Possible: which one, and how often it comes, a host profile
        (py-spy, gc callbacks) over the stall says."""
        return Finding(
            evidence=[*stall_evidence(stall, step), ev("metrics.concurrency", 1)],
            grade=Grade.possible,
            detail=f"The only stream {stopped_for(stall, step)} with no other prompt in flight to prefill.",
        )

    @rule(
        SPECS["prefill-stalls"],
        AS.d << RunDiff(setting="concurrency", figure="output_tokens_per_s", slowdown=MATCH.slowdown, slower=MATCH.slower,
                        faster=MATCH.faster),
        Metrics(input_tokens=MATCH.prompt),
        TEST(lambda slowdown, slower, faster, prompt: slowdown >= FEWER_TOKENS_WITH_MORE_STREAMS and larger(slower, faster)
             and prompt >= LONG_PROMPT_TOKENS),
    )
    def more_streams_fewer_tokens(self, d, slowdown, slower, faster, prompt):
        """More concurrent streams of long prompts made fewer output tokens per second in all: each stream's
        prefill ran in the steps the others decode in. Preemption or a cache that no longer fits would do it
        too, so it is indicated, and a trace's step split measures it."""
        return Finding(
            evidence=[ev("runs.changed", "concurrency"), ev("runs.faster", faster), ev("runs.slower", slower),
                      ev("runs.ratio", slowdown), ev("metrics.input_tokens", prompt)],
            grade=Grade.indicated,
            detail=f"{slower} concurrent streams made {slowdown:.3g}x fewer output tokens per second in all than {faster}, "
            f"with {prompt:.0f}-token prompts: decode alone would have made more.",
        )

    @rule(
        SPECS["prefill-stalls"],
        AS.e << Expectation(concurrency=MATCH.fewer),
        AS.m << Metrics(concurrency=MATCH.more, input_tokens=MATCH.prompt),
        TEST(lambda e, m, fewer, more, prompt: more > fewer and prompt >= LONG_PROMPT_TOKENS and beyond_batching(e, m)),
    )
    def less_per_stream_than_batching_allows(self, e, m, fewer, more, prompt):
        """With more streams of long prompts, each stream got less than the added streams' decode could cost it:
        their prefill ran in the steps this stream decodes in. A cache too small for the streams (preemption) would
        do it too, so it is indicated; a trace's step split measures it."""
        mine, theirs = stream_rates(m, e)
        return Finding(
            evidence=[ev("expected.concurrency", fewer), ev("expected.per_stream_tokens_per_s", theirs),
                      ev("metrics.concurrency", more), ev("metrics.per_stream_tokens_per_s", mine), ev("metrics.input_tokens", prompt)],
            grade=Grade.indicated,
            detail=f"{more:g} streams got {mine:.3g} tokens/s each against {theirs:.3g} at {fewer:g}: batching alone leaves each at "
            f"least {theirs * fewer / more:.3g}.",
        )

    @rule(
        SPECS["prefill-stalls"],
        StepMix(prefill_steps=MATCH.prefills, decode_steps=MATCH.decodes),
        Metrics(concurrency=MATCH.streams),
        OR(NOT(Stream(worst_stall_ms=W())), NOT(Reference(step_ms=W()))),
        TEST(lambda prefills, decodes, streams: streams >= OTHER_STREAMS and decodes > 0 and prefills >= PREFILL_STEP_SHARE * (prefills + decodes)),
    )
    def prefill_only_steps_while_streams_decode(self, prefills, decodes, streams):
        """Whole steps given to prefill while other streams decode: each of those streams sits them out. How long a
        prefill step takes is not given, so it is indicated; their time against the decode steps' measures it. A
        stall recorded without a per-token time cannot be counted in steps, so it leaves this reading standing."""
        share = prefills / (prefills + decodes)
        return Finding(
            evidence=[ev("step_mix.prefill_steps", prefills), ev("step_mix.decode_steps", decodes), ev("metrics.concurrency", streams)],
            grade=Grade.indicated,
            detail=f"{share:.0%} of the steps only prefilled while {streams:g} streams were in flight: a decoding stream waits "
            f"through them, at least {1 / (1 - share):.3g}x its decode-only per-token time if they are as long as a decode step.",
        )

    @rule(SPECS["prefill-stalls"], Server(prefill_priority=True), NOT(Stream(worst_stall_ms=W())))
    def prefill_first(self):
        return Finding(
            evidence=[ev("server.prefill_priority", True)],
            detail="Prefill is scheduled before any decode; no stream stall was recorded to bound it.",
        )

    @rule(SPECS["prefill-stalls"], Server(prefill_priority=True), Stream(worst_stall_ms=MATCH.stall), NOT(Reference(step_ms=W())))
    def prefill_first_stall_without_a_step(self, stall):
        """Prefill scheduled first and a stream that stalled: with no per-token time the stall cannot be
        counted in steps, so it is indicated, not sized."""
        return Finding(
            evidence=[ev("server.prefill_priority", True), ev("stream.worst_stall_ms", stall, "ms")],
            grade=Grade.indicated,
            detail=f"Prefill is scheduled before any decode and a stream stopped for {stall:.4g} ms; the per-token time "
            "would say how many steps that is.",
        )


def tail_gap_held(b, step_ms: float, p99: float) -> bool:
    """The client's p99 gap is a burst's worth of steps beyond its own delay, and chunks waited after emission."""
    return p99 - own_delay(b) >= BURST_RATIO * step_ms and held_in_the_tail(b, step_ms)


def tail_gap_finding(b, device: float, p99: float, *held) -> Finding:
    return Finding(
        evidence=[ev("boundaries.device_step_ms", device, "ms"), *_per_token(b, "client_p99_ms", p99), *_own_delay(b), *held],
        removable_ms=p99 - device - own_delay(b),
        step_ms=p99,
        detail="The gain is on the client's p99 inter-chunk gap, not on the median.",
    )


def proxy_tail_finding(b, server: float, p99: float, *held_evidence) -> Finding:
    evidence = [ev("boundaries.server_emission_ms", server, "ms"), ev("boundaries.client_p99_ms", p99, "ms"), *_own_delay(b)]
    held = b.get("buffered_p99_ms")
    if held is not None:
        evidence.append(ev("boundaries.buffered_p99_ms", held, "ms"))
    outside = p99 - server - own_delay(b)
    return Finding(
        evidence=[*evidence, *held_evidence],
        removable_ms=outside if held is None else min(held - own_delay(b), outside),
        step_ms=p99,
        detail="Chunks arrive in bursts: the gain is on the p99 gap the user sees, not on the rate.",
    )


def bunching_is_the_clients(s, b) -> bool:
    """A burst is one long gap and then near-zero ones. Where the client's measured stalls account for the near-zero
    gaps of an uncompressed stream, they account for the long gaps before them too: the tail is the busy host's, on
    the client's side or on the server's writer sharing its cores (three lab servers under two CPU burners: the
    client kept waiting 55-63 % of the load, 15-33 % of the gaps near zero, and a p99 gap two to three steps long).
    Not known without both counts."""
    if b.get("client_stalled_share") is None:
        return False
    return not held_on_the_way(s, b)


def held_in_the_tail(b, server_ms: float) -> bool:
    """Chunks wait after emission for a burst's worth of steps beyond the client's own delay, or
    the wait was not measured."""
    held = b.get("buffered_p99_ms")
    return held is None or held - own_delay(b) >= (BURST_RATIO - 1) * server_ms


def bursts_finding(s, parent_cap_ms: float | None) -> Finding:
    evidence = [ev("stream.bursty", True)]
    evidence += [ev(f"stream.{n}", s[n], "ms" if n.endswith("_ms") else "") for n in ("tokens_per_burst", "worst_stall_ms") if n in s]
    evidence += [ev("stream.compressed", True)] if s.get("compressed") else []
    return Finding(evidence=evidence, removable_ms=parent_cap_ms, detail="Emission times at the server tell the server from a proxy.")


def client_could_run(b) -> bool:
    """The client ran for more than HELD_BEYOND_CLIENT of the load (or its stalls were not measured): a client kept
    waiting longer cannot tell a held gap from its own."""
    return (b.get("client_stalled_share") or 0.0) <= 1 - HELD_BEYOND_CLIENT


def held_beyond_the_client(s, b) -> float:
    """The share of the stream's gaps that were near zero beyond the share of the load the client itself could not
    run (all of them where that share was not measured)."""
    return s.get("near_zero_gap_fraction", 1.0) - (b.get("client_stalled_share") or 0.0)


def held_on_the_way(s, b) -> bool:
    """Bursts someone on the way made, not the reader: the event stream came compressed (a deflate or gzip stream
    releases events when its buffer fills or it flushes, which a server streaming tokens does not ask for; the real
    vLLM behind nginx with gzip on: 32 tokens a burst while the client itself was kept waiting 96 % of the read), or
    more near-zero gaps than the client's own stalls account for."""
    return s.get("compressed") is True or held_beyond_the_client(s, b) >= HELD_BEYOND_CLIENT


def _held_evidence(s, b) -> list:
    return ([ev("stream.compressed", True)] if s.get("compressed") else []) + [
        ev(f"{section}.{name}", facts[name]) for section, facts, name in
        (("stream", s, "near_zero_gap_fraction"), ("boundaries", b, "client_stalled_share")) if name in facts]


def own_delay(b) -> float:
    """The p99 delay the measuring client's own host added to its receipt times (0: not measured)."""
    return b.get("client_delay_p99_ms") or 0.0


def _own_delay(b) -> list:
    return [ev("boundaries.client_delay_p99_ms", b["client_delay_p99_ms"], "ms")] if b.get("client_delay_p99_ms") else []


def context_slope_per_1k(s) -> float:
    """The sweep's step growth per 1k tokens of context: what a longer output costs through its KV alone."""
    span = s["context_hi"] - s["context_lo"]
    return 1e3 * (s["step_hi_ms"] - s["step_lo_ms"]) / span if span > 0 else 0.0


def _per_token(b, field: str, per_token: float) -> list:
    """Evidence for a chunk interval: the raw value, and the per-token one when chunks hold several tokens."""
    raw = b[field]
    if raw == per_token:
        return [ev(f"boundaries.{field}", raw, "ms")]
    return [ev(f"boundaries.{field}", raw, "ms"), ev("boundaries.tokens_per_chunk", b["tokens_per_chunk"]),
            ev(f"boundaries.{field}_per_token", per_token, "ms")]
