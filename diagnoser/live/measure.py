"""One live measurement, stage by stage, into a case whose every fact names its source.

    measure(url, options, progress) -> Live     the case, and what could not be had and how to supply it

The total time is bounded by ``options.duration_s``: the load gets what the other stages leave,
and a stage that cannot run (no /metrics, no profiler) is named in ``missing`` with the way
to supply what it would have given, never guessed.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from diagnoser.errors import InputError
from diagnoser.http import Client
from diagnoser.live import discover as disc
from diagnoser.live.load import Shape, Window, run_load
from diagnoser.live.profile import Profile, profile
from diagnoser.live.prompts import WARM_UP_WORDS, fit, words
from diagnoser.models.case import Case
from diagnoser.models.serving import Run
from diagnoser.readers.facts import SourcedFacts, apply_facts, observation_facts
from diagnoser.probes.sse_client import request_body, stream

# Bounds no option can lift: a live run is a guest on someone's server.
MAX_REQUESTS = 256
MAX_CONCURRENCY = 64
MAX_TOKENS = 4096
MAX_DURATION_S = 1800
# The profiled load: streams at the same concurrency, so the trace holds the load's steps; long enough that
# intermittent work lands in it. At 48 tokens (0.1-0.3 s of the real CPU build's steps) one bench_live run caught
# none of the long-prompts fault's 2000-token prefills (one every 0.15-0.2 s) and another caught six mixed steps.
PROFILED_TOKENS = 96
# Where other clients' requests reached the server during the load, the profile lasts long enough for a few
# of them to arrive: 1200-token prompts every quarter second fell between the steps of a 96-token window
# (0.3-0.6 s) in one bench_live_variants run of six. Capped, so a trace stays a few hundred steps.
ARRIVALS_IN_PROFILE = 3
PROFILED_TOKENS_MAX = 384
PROFILE_SETTLE_S = 120
# Request-level switches (default penalties, response_format) are measured both ways in alternating loads
# (ABBA, so the machine's drift falls on both sides), as many rounds as the stage's time allows up to
# ABLATION_ROUNDS, and each side is the median of its loads. One load of four short streams is half a second
# here: with two rounds and means, the real CPU build's default penalties measured anywhere from 0.15 to 2.8 ms
# a token from run to run (bench_live, bench_lab), and a single stalled load decided it.
ABLATION_ROUNDS = 6
NEUTRAL_PENALTIES = {"repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}


@dataclass
class Options:
    duration_s: float = 180.0
    concurrency: int = 4
    requests: int = 16
    max_tokens: int = 128
    prompt_tokens: int = 64
    model: str | None = None
    profile: bool = True
    profile_dir: Path | None = None
    server_args: str | None = None
    server_log: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # sampling fields or response_format sent with each request

    def check(self) -> None:
        for name, value, high in (("--requests", self.requests, MAX_REQUESTS), ("--concurrency", self.concurrency, MAX_CONCURRENCY),
                                  ("--max-tokens", self.max_tokens, MAX_TOKENS), ("--prompt-tokens", self.prompt_tokens, 65536)):
            if not 1 <= value <= high:
                raise InputError(f"{name} must be 1..{high}, got {value}")
        if not 10 <= self.duration_s <= MAX_DURATION_S:
            raise InputError(f"--duration must be 10..{MAX_DURATION_S} s, got {self.duration_s:g}")


@dataclass
class Live:
    case: Case
    missing: list[str]
    notes: list[str]


def _warm_up(http: Client, url: str, model: str) -> float:
    """One short request (a fresh server's first pays one-time costs); the tokens per word of its prompt."""
    body = request_body("completions", model, words(WARM_UP_WORDS, 10_000), 8, {})
    reply = stream(http, f"{url}/v1/completions", body, 120)
    return (reply.prompt_tokens or WARM_UP_WORDS) / WARM_UP_WORDS


def _per_token_ms(window: Window) -> tuple[float | None, str]:
    """Mean time per output token over a window's streams, and where it was read: the engine's own
    (vllm:request_time_per_output_token_seconds over the window) where the server has metrics, since a
    client on a loaded host reads chunks in bursts; else the client's (E2EL - TTFT) / (tokens - 1)."""
    if window.before and window.after:
        tpot = _window_facts(window).value("observations.metrics.tpot_ms")
        if isinstance(tpot, dict) and tpot.get("mean"):
            return tpot["mean"], "engine"
    from diagnoser.probes.serving_metrics import request_metrics

    tpots = [m.tpot_ms for m in map(request_metrics, window.responses) if m.tpot_ms is not None]
    return (statistics.fmean(tpots), "client_receipt") if tpots else (None, "client_receipt")


@dataclass(frozen=True)
class Ablation:
    """A request-level switch measured both ways: the load as served, and with the switch undone in the request."""

    setting: str
    served: str
    undone: str
    undo: Callable[[dict[str, Any]], dict[str, Any]]  # the request's extra fields without the mechanism


ABLATIONS = {
    "penalties": Ablation("penalties", "server default (penalties on)", "penalties neutral in the request",
                          lambda extra: {**extra, **NEUTRAL_PENALTIES}),
    "structured_output": Ablation("structured_output", "response_format as asked", "the same requests without response_format",
                                  lambda extra: {k: v for k, v in extra.items() if k not in ("response_format", "guided_json")}),
}


def _ablation_runs(ablations: list[Ablation], url: str, model: str, shape: Shape, tokens_per_word: float, deadline: float) -> list[Run]:
    """The load's shape as served and with each switch undone, in turn, the order reversed every other round so
    drift falls on every side, until ``deadline`` or ABLATION_ROUNDS: one baseline run with every switch on, and a
    run per switch that differs from it in that one. At the load's concurrency, since a per-sequence cost
    (penalties over each sequence's tokens) grows with the batch."""
    served_ms: list[float] = []
    undone_ms: dict[str, list[float]] = {a.setting: [] for a in ablations}
    boundaries = set()
    for i in range(ABLATION_ROUNDS):
        if i and time.monotonic() >= deadline:
            break
        for ablation in ablations:
            for served in ((True, False) if i % 2 == 0 else (False, True)):
                extra = shape.extra if served else ablation.undo(shape.extra)
                batch = Shape(shape.concurrency, shape.concurrency, shape.prompt_tokens, shape.max_tokens, extra)
                window = run_load(url, model, batch, tokens_per_word, deadline, seed=500 + i)
                per_token, boundary = _per_token_ms(window)
                if per_token is not None:
                    (served_ms if served else undone_ms[ablation.setting]).append(per_token)
                    boundaries.add(boundary)
    boundary = boundaries.pop() if len(boundaries) == 1 else "unknown"
    on = {a.setting: True for a in ablations}
    runs = [Run(name=" + ".join(a.served for a in ablations), settings=on, baseline=True,
                figures={"per_token_ms": statistics.median(served_ms)}, boundary=boundary)] if served_ms else []
    runs += [
        Run(name=a.undone, settings={**on, a.setting: False}, figures={"per_token_ms": statistics.median(undone_ms[a.setting])},
            boundary=boundary)
        for a in ablations if served_ms and undone_ms[a.setting]
    ]
    return runs if len(runs) > 1 else []


def _ablations(facts: SourcedFacts, extra: dict[str, Any]) -> list[Ablation]:
    """The switches this load turns on: the server's default penalties, the user's response_format."""
    found = []
    if facts.value("observations.server.penalties") or facts.value("observations.server.repetition_penalty"):
        found.append(ABLATIONS["penalties"])
    if "response_format" in extra or "guided_json" in extra:
        found.append(ABLATIONS["structured_output"])
    return found


def measure(url: str, options: Options, progress: Callable[[str], None] = lambda _: None) -> Live:
    options.check()
    start = time.monotonic()
    deadline = start + options.duration_s
    facts = SourcedFacts()
    with Client(url, timeout_s=30, deadline=deadline) as http:
        progress("discover: /v1/models, /version, the configuration")
        server = disc.discover(http, url, options.model)
        facts.merge(server.facts)
        if options.server_args:
            from diagnoser.readers.server_args import from_command_line

            facts.merge(from_command_line(options.server_args))
        if options.server_log:
            from diagnoser.readers.server_args import from_server_log

            facts.merge(from_server_log(options.server_log))
        progress("warm-up: one short request")
        tokens_per_word = _warm_up(http, url, server.model)
    prompt_tokens, max_tokens = fit(options.prompt_tokens, options.max_tokens, server.max_model_len)
    shape = Shape(options.requests, options.concurrency, prompt_tokens, max_tokens, options.extra)

    # the load gets the time the later stages do not need; a profile and an ablation take a fraction each
    load_deadline = start + 0.5 * options.duration_s
    progress(f"load: {shape.requests} streams of {max_tokens} tokens, {shape.concurrency} at a time")
    window = run_load(url, server.model, shape, tokens_per_word, load_deadline)
    if not window.responses:
        raise InputError(f"{url}: no stream completed under load" + (f": {window.failed[0]}" if window.failed else ""))
    from diagnoser.probes import client

    client_obs = client.to_observations(client.client_facts(window.responses, f"{url}/v1/completions", "completions",
                                                           server.model, shape.concurrency, max_tokens,
                                                           window.client_delay_p99_ms, window.client_stalled_share))
    facts.merge(observation_facts(client_obs, f"client: {len(window.responses)} streams at concurrency {shape.concurrency}"))
    facts.add("observations.metrics.concurrency", shape.concurrency, "client: requests in flight")
    if window.before and window.after:
        facts.merge(_window_facts(window))
    else:
        facts.missing.append("/metrics: no serving metrics (engine-side TTFT, ITL, queue time); expose /metrics or import a scrape")

    ablations = _ablations(facts, options.extra)
    runs = []
    if ablations:
        progress("ablate: " + "; ".join(f"{a.served} against {a.undone}" for a in ablations) + f", up to {ABLATION_ROUNDS} rounds")
        runs = _ablation_runs(ablations, url, server.model, shape, tokens_per_word, start + 0.7 * options.duration_s)
    if runs:
        facts.add("observations.runs", [r.model_dump(mode="json", exclude_none=True) for r in runs],
                  ("/metrics vllm:request_time_per_output_token_seconds" if runs[0].boundary == "engine" else "client TPOT")
                  + " over loads with each switch as served and undone, alternating (the median of each side)")

    if options.profile:
        folder = options.profile_dir or server.profile_dir
        others_per_s = _others_per_s(facts, window)
        profiled_shape = Shape(shape.concurrency, shape.concurrency, prompt_tokens,
                               profiled_tokens(others_per_s, _per_token_ms(window)[0], max_tokens), options.extra)
        progress("profile: the same load twice, without and with the profiler")
        twins = [run_load(url, server.model, profiled_shape, tokens_per_word, deadline, seed=900)]
        profiled: list[Window] = []
        found: Profile = profile(url, folder, lambda: profiled.append(run_load(url, server.model, profiled_shape, tokens_per_word, deadline, seed=900)),
                                 max(10.0, min(PROFILE_SETTLE_S, deadline - time.monotonic())))
        if found.traces:
            twins.append(run_load(url, server.model, profiled_shape, tokens_per_word, deadline, seed=900))
            progress(f"analyze: {len(found.traces)} trace file(s)")
            facts.merge(_trace_facts(found.traces, _profiler_cost_ms(profiled, twins)))
        else:
            facts.missing.append(f"profile: {found.note}")
    case = apply_facts(Case(title=f"live: {server.model} at {url}"), facts)
    disagreements = [f"{c.path}: {c.kept.value!r} ({c.kept.source}) against {c.other.value!r} ({c.other.source})" for c in facts.conflicts]
    return Live(case=case, missing=facts.missing, notes=disagreements)


def _others_per_s(facts: SourcedFacts, window: Window) -> float:
    """Requests a second the server finished beyond this load's own: other clients' traffic."""
    served = facts.value("observations.metrics.requests_per_s")
    if not isinstance(served, (int, float)) or window.duration_s <= 0:
        return 0.0
    return max(0.0, served - len(window.responses) / window.duration_s)


def profiled_tokens(others_per_s: float, per_token_ms: float | None, max_tokens: int) -> int:
    """Tokens a profiled stream asks for: PROFILED_TOKENS, or enough steps for ARRIVALS_IN_PROFILE of the other
    clients' requests to land in the trace, up to PROFILED_TOKENS_MAX (and never past the load's own length)."""
    wanted = PROFILED_TOKENS
    if others_per_s > 0 and per_token_ms:
        wanted = max(wanted, min(PROFILED_TOKENS_MAX, math.ceil(ARRIVALS_IN_PROFILE / others_per_s * 1000 / per_token_ms)))
    return min(max_tokens, wanted)


def _profiler_cost_ms(profiled: list[Window], twins: list[Window]) -> float | None:
    """What the profiler added per token: the profiled load's mean time per token less the mean of
    the same load's before and after it (like for like, the machine's drift cancelled)."""
    with_profiler = _per_token_ms(profiled[0])[0] if profiled else None
    without = [t for t, _ in map(_per_token_ms, twins) if t is not None]
    if with_profiler is None or len(without) < 2:
        return None
    return with_profiler - statistics.fmean(without)


def _trace_facts(traces: list[Path], profiler_cost_ms: float | None) -> SourcedFacts:
    """The trace's budget, with the step less what the profiler added as the unprofiled step (the
    profiler's own time lands in the host part and must not be claimed)."""
    from diagnoser.trace.analysis import analyze_traces
    from diagnoser.trace.facts import to_observations
    from diagnoser.trace.kineto import read_kineto_many

    found = to_observations(analyze_traces(read_kineto_many(traces)))
    updates = {k: getattr(found, k) for k in found.model_fields_set}
    if found.budget is not None and profiler_cost_ms is not None and found.budget.step_ms - profiler_cost_ms > 0:
        updates["budget"] = found.budget.model_copy(update={"unprofiled_step_ms": found.budget.step_ms - max(0.0, profiler_cost_ms)})
    names = ", ".join(p.name for p in traces)
    return observation_facts(updates, f"trace: {names}")


def _window_facts(window: Window) -> SourcedFacts:
    from diagnoser.readers.prometheus import parse_scrape
    from diagnoser.readers.serving_metrics import from_window

    return from_window(parse_scrape(window.before), parse_scrape(window.after), [parse_scrape(g) for g in window.gauges], window.duration_s)
