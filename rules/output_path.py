"""Between the device and the user: output processing, transport, buffering, prefill interference.

Each boundary adds work the device bound ignores, so the three clocks (device step, server
emission, client receipt) are compared pairwise: the first boundary where the interval grows
is where the time goes.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    TEST,
    Boundaries,
    Check,
    Finding,
    Host,
    Reference,
    RemedySpec,
    RuleSet,
    RuleSpec,
    Server,
    ev,
    rule,
    undo,
)

# Intervals that differ by under 15-25 % are within streaming jitter.
SERVER_SLACK = 1.15
CLIENT_SLACK = 1.25
# Per-token host work that grows by 5 % of the step per 1k generated tokens is visible in long outputs.
GROWTH_SHARE = 0.05
# A p99/p50 inter-token ratio above 2.5 means regular stalls, not jitter.
SPIKE_RATIO = 2.5

OUTPUT_UNDO = (
    undo("per_user_latency", "the client's median inter-chunk interval does not fall"),
    undo("p99_itl", "p99 inter-token latency at the client rises"),
)

CLIENT_GAP = RuleSpec(
    id="client-gap",
    title="Device steps are fast, client gaps are long",
    requires=("boundaries",),
    explanation="Tokens leave the GPU faster than they reach the client: output processing, transport or buffering.",
    check=Check(
        measure="the same steps at device completion, server emission and client receipt (diagnoser probe client + trace)",
        confirms="the interval grows at the server or at the client boundary",
        refutes="device step and client interval agree once chunking (tokens per chunk) is accounted for",
    ),
    remedies=(RemedySpec(action="fix the boundary where the interval grows (see the refinements)", cost="depends on the cause", risk="none by itself"),),
    undo=OUTPUT_UNDO,
)

SERVER_OUTPUT = RuleSpec(
    id="server-output-processing",
    title="Output processing on the server between device and emission",
    parent="client-gap",
    explanation="Sampling hand-off, detokenization or response building adds time per token before the server emits it.",
    check=Check(
        measure="server-side time from step completion to emission (engine output-processing spans or py-spy)",
        confirms="detokenization or response building fills the difference",
        refutes="the server emits right after the step",
    ),
    remedies=(RemedySpec(action="detokenize incrementally / in a separate process; stream token ids if the client allows", cost="engine flag or code change", risk="low"),),
    undo=OUTPUT_UNDO,
)

PROXY_BUFFERING = RuleSpec(
    id="proxy-buffering",
    title="Proxy or streaming buffering between server and client",
    parent="client-gap",
    explanation="The server emits on time but chunks reach the client late or in bursts: a proxy, gateway or client buffer holds them.",
    check=Check(
        measure="client receipt with the proxy bypassed (direct to the server port), same prompt",
        confirms="direct receipt matches the server's emission interval",
        refutes="direct receipt is as slow (the client itself is slow to read)",
    ),
    remedies=(RemedySpec(action="disable response buffering on the proxy (e.g. proxy_buffering off / X-Accel-Buffering: no)", cost="configuration", risk="low"),),
    undo=OUTPUT_UNDO,
)

OUTPUT_GROWTH = RuleSpec(
    id="output-length-growth",
    title="Per-token host post-processing grows with output length",
    requires=("boundaries",),
    explanation="The inter-token interval rises as more tokens are generated: host work over the whole history each step (penalties, stop-string scans, full re-detokenization).",
    check=Check(
        measure="inter-token interval against tokens generated, with and without penalties/stop strings",
        confirms="the slope vanishes without the history-wide processing",
        refutes="the slope stays (then look at KV/attention growth instead)",
    ),
    remedies=(RemedySpec(action="apply penalties on the GPU with incremental counts; detokenize incrementally", cost="engine flag or upgrade", risk="sampling must stay identical"),),
    undo=OUTPUT_UNDO + (undo("quality", "sampled outputs change"),),
)

PENALTY_HISTORY = RuleSpec(
    id="penalty-over-history",
    title="Repetition/frequency penalties scan the token history every step",
    parent="output-length-growth",
    explanation="Penalties computed over all generated tokens cost more per step as the output grows.",
    check=Check(
        measure="the slope of inter-token interval with penalties disabled for a test run",
        confirms="the slope disappears",
        refutes="the slope stays",
    ),
    remedies=(RemedySpec(action="use the engine's GPU penalty path with running counts", cost="engine upgrade", risk="low"),),
    undo=OUTPUT_GROWTH.undo,
)

PREFILL_STALLS = RuleSpec(
    id="prefill-stalls",
    title="Prefill work stalls decode: inter-token spikes",
    requires=("host",),
    explanation="New prompts are prefilled in the same steps as running decodes, so some decode steps take much longer.",
    check=Check(
        measure="inter-token intervals aligned with prefill arrivals (server logs or trace)",
        confirms="spikes coincide with prefill batches",
        refutes="spikes happen without prefill (look at host pauses, GC or throttling)",
    ),
    remedies=(RemedySpec(action="chunked prefill with a smaller token budget per step, or separate prefill instances", cost="configuration or deployment", risk="TTFT rises"),),
    undo=(undo("p99_itl", "p99 inter-token latency does not fall"), undo("per_user_latency", "time to first token rises beyond the target")),
)


class OutputPathRules(RuleSet):
    @rule(
        CLIENT_GAP,
        Boundaries(device_step_ms=MATCH.device, client_receipt_ms=MATCH.client),
        TEST(lambda client, device: client >= CLIENT_SLACK * device),
    )
    def client_gap(self, device, client):
        return Finding(
            evidence=[ev("boundaries.device_step_ms", device, "ms"), ev("boundaries.client_receipt_ms", client, "ms")],
            removable_ms=client - device,
            step_ms=client,
            detail="Gains are shares of the client's inter-chunk interval.",
        )

    @rule(
        SERVER_OUTPUT,
        Boundaries(device_step_ms=MATCH.device, server_emission_ms=MATCH.server),
        TEST(lambda server, device: server >= SERVER_SLACK * device),
    )
    def server_output_processing(self, device, server):
        return Finding(
            evidence=[ev("boundaries.device_step_ms", device, "ms"), ev("boundaries.server_emission_ms", server, "ms")],
            removable_ms=server - device,
            step_ms=server,
        )

    @rule(
        PROXY_BUFFERING,
        AS.b << Boundaries(server_emission_ms=MATCH.server, client_receipt_ms=MATCH.client),
        TEST(lambda client, server: client >= CLIENT_SLACK * server),
    )
    def proxy_buffering(self, b, server, client):
        evidence = [ev("boundaries.server_emission_ms", server, "ms"), ev("boundaries.client_receipt_ms", client, "ms")]
        if "tokens_per_chunk" in b:
            evidence.append(ev("boundaries.tokens_per_chunk", b["tokens_per_chunk"]))
        return Finding(evidence=evidence, removable_ms=client - server, step_ms=client)

    @rule(
        OUTPUT_GROWTH,
        Boundaries(itl_growth_ms_per_1k_output=MATCH.growth),
        Reference(step_ms=MATCH.step),
        TEST(lambda growth, step: growth >= GROWTH_SHARE * step),
    )
    def output_length_growth(self, growth, step):
        return Finding(
            evidence=[ev("boundaries.itl_growth_ms_per_1k_output", growth, "ms"), ev("reference.step_ms", step, "ms")],
            removable_ms=growth,
            step_ms=step + growth,
            detail="Gain shown for a step 1k tokens into the output.",
        )

    @rule(PENALTY_HISTORY, Server(repetition_penalty=True))
    def penalty_over_history(self, parent_cap_ms):
        return Finding(evidence=[ev("server.repetition_penalty", True)], removable_ms=parent_cap_ms)

    @rule(
        PREFILL_STALLS,
        Host(itl_spike_ratio=MATCH.ratio, prefill_interleaved=True),
        Reference(step_ms=MATCH.step),
        TEST(lambda ratio: ratio >= SPIKE_RATIO),
    )
    def prefill_stalls(self, ratio, step):
        return Finding(
            evidence=[ev("host.itl_spike_ratio", ratio), ev("host.prefill_interleaved", True)],
            removable_ms=step * (ratio - 1),
            step_ms=step * ratio,
            detail="The gain is on the spiking (p99) interval, not on the median step.",
        )
