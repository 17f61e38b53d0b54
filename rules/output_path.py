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
# A client p99 gap of twice the server's emission interval, with the median on time, is
# chunks held and released in bursts: the stream's rate is intact, its smoothness is not.
BURST_RATIO = 2.0

# Server and client intervals are compared per token (per chunk / tokens per chunk), so chunked
# streaming is not mistaken for slow output; see Boundaries in diagnoser.engine.facts.


class OutputPathRules(RuleSet):
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
        TEST(lambda p99, device: p99 >= BURST_RATIO * device),
    )
    def client_gap_in_the_tail(self, b, device, p99):
        return Finding(
            evidence=[ev("boundaries.device_step_ms", device, "ms"), *_per_token(b, "client_p99_ms", p99)],
            removable_ms=p99 - device,
            step_ms=p99,
            detail="The gain is on the client's p99 inter-chunk gap, not on the median.",
        )

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

    @rule(
        SPECS["proxy-buffering"],
        AS.b << Boundaries(server_token_ms=MATCH.server, client_token_ms=MATCH.client),
        TEST(lambda client, server: client >= CLIENT_SLACK * server),
    )
    def proxy_buffering(self, b, server, client):
        evidence = [*_per_token(b, "server_emission_ms", server), *_per_token(b, "client_receipt_ms", client)]
        return Finding(evidence=evidence, removable_ms=client - server, step_ms=client)

    @rule(
        SPECS["proxy-buffering"],
        Boundaries(server_emission_ms=MATCH.server, client_p99_ms=MATCH.p99),
        TEST(lambda p99, server: p99 >= BURST_RATIO * server),
    )
    def proxy_bursts(self, server, p99):
        return Finding(
            evidence=[ev("boundaries.server_emission_ms", server, "ms"), ev("boundaries.client_p99_ms", p99, "ms")],
            removable_ms=p99 - server,
            step_ms=p99,
            detail="Chunks arrive in bursts: the gain is on the p99 gap the user sees, not on the rate.",
        )

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


def _per_token(b, field: str, per_token: float) -> list:
    """Evidence for a chunk interval: the raw value, and the per-token one when chunks hold several tokens."""
    raw = b[field]
    if raw == per_token:
        return [ev(f"boundaries.{field}", raw, "ms")]
    return [ev(f"boundaries.{field}", raw, "ms"), ev("boundaries.tokens_per_chunk", b["tokens_per_chunk"]),
            ev(f"boundaries.{field}_per_token", per_token, "ms")]
