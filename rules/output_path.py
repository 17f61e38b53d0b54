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
    Finding,
    Host,
    Reference,
    RuleSet,
    Server,
    ev,
    load_specs,
    rule,
)

SPECS = load_specs(__file__)

# Intervals that differ by under 15-25 % are within streaming jitter.
SERVER_SLACK = 1.15
CLIENT_SLACK = 1.25
# Per-token host work that grows by 5 % of the step per 1k generated tokens is visible in long outputs.
GROWTH_SHARE = 0.05
# A p99/p50 inter-token ratio above 2.5 means regular stalls, not jitter.
SPIKE_RATIO = 2.5


class OutputPathRules(RuleSet):
    @rule(
        SPECS["client-gap"],
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
        SPECS["server-output-processing"],
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
        SPECS["proxy-buffering"],
        AS.b << Boundaries(server_emission_ms=MATCH.server, client_receipt_ms=MATCH.client),
        TEST(lambda client, server: client >= CLIENT_SLACK * server),
    )
    def proxy_buffering(self, b, server, client):
        evidence = [ev("boundaries.server_emission_ms", server, "ms"), ev("boundaries.client_receipt_ms", client, "ms")]
        if "tokens_per_chunk" in b:
            evidence.append(ev("boundaries.tokens_per_chunk", b["tokens_per_chunk"]))
        return Finding(evidence=evidence, removable_ms=client - server, step_ms=client)

    @rule(
        SPECS["output-length-growth"],
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

    @rule(SPECS["penalty-over-history"], Server(repetition_penalty=True))
    def penalty_over_history(self, parent_cap_ms):
        return Finding(evidence=[ev("server.repetition_penalty", True)], removable_ms=parent_cap_ms)

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
            detail="The gain is on the spiking (p99) interval, not on the median step.",
        )
