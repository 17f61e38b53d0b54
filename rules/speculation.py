"""Speculative decoding judged on accepted output per unit of cycle cost.

Fewer target invocations is not a win by itself: each cycle pays drafting, verification and
other work whether or not the drafts are accepted, and acceptance falls at long context or
on unfamiliar text.
"""

from diagnoser.engine import (
    AS,
    MATCH,
    NOT,
    P,
    TEST,
    Finding,
    HostCostFact,
    Metrics,
    RuleSet,
    RunDiff,
    Server,
    Speculation,
    W,
    ev,
    load_specs,
    rule,
)
from diagnoser.whatif import expected_tokens_per_cycle

from diagnoser.rules.comparison import SLOWER, UNITS, ablation, ablation_finding

SPECS = load_specs(__file__)

# From this context on, verification of k+1 query tokens reads the whole KV each cycle.
LONG_CONTEXT = 8192
# Under 1.5 emitted tokens per cycle speculation cannot repay a typical cycle: verifying k+1 tokens
# costs at least one ordinary step and drafting adds to it (the reference cycle is 16 ms against a
# 9 ms step, 1.8 steps), and fewer than half a draft token per cycle is accepted, so most drafting
# is discarded work. (a = 0.2, k = 7 gives 1.25 tokens, a 0.70x slowdown at the reference's costs.)
MIN_TOKENS_PER_CYCLE = 1.5
# A cycle verifies k+1 tokens and emits 1 + k x rate of them (rate: accepted / drafted tokens, from
# the counters). Keeping under half of what it verifies, a cycle throws away most of its verify work
# and all its rejected drafting: 20 % of 8 drafts keeps 2.6 of 9 tokens (29 %), and the real server's
# time per token rose from 2.35 to 3.99 ms; EAGLE-like 70 % of 3 drafts keeps 3.1 of 4 (78 %).
MIN_KEPT_SHARE = 0.5
# Kept share cannot fall when a cycle drafts one token (it keeps at least the verify's own of two), so under one
# accepted token in four drafted the drafter's work is named wasted on its own: the real vLLM's n-gram drafter,
# at 1.0 drafted token a cycle and 4.6 % accepted, emitted 1.05 tokens a cycle and kept 52 % of what it verified.
MIN_ACCEPTANCE = 0.25
# A drafted token costs at most half an ordinary step and its verify row a few per cent of one at a few rows, so a
# cycle that grows by 0.9 of a step or more per further draft pays a weight read per draft: then no acceptance repays
# a draft, and the counters' acceptance is not what makes it slow. (On a GB10, 4-bit MTP grew 70 ms a draft against a
# 69 ms ordinary step; draft models measured 0.6-0.75 of a step a draft.)
ROW_DEARER = 0.9
# A drafter is one layer (an MTP head, EAGLE) or a model a few per cent of the target's size, and a cycle's host work a
# fraction of a step: drafting and bookkeeping that take half an ordinary step a cycle give back half a token of every
# cycle's yield before the verify is paid.
DRAFTING_SHARE = 0.5


class SpeculationRules(RuleSet):
    @rule(SPECS["speculation-slowdown"], *ablation("speculative"))
    def speculation_measured(self, d):
        """Speculation on is slower than off at the same load: drafting and verification cost more than they emit."""
        return ablation_finding(d)

    @rule(
        SPECS["speculation-slowdown"],
        AS.d << RunDiff(setting="speculative", before=MATCH.before, base_time=MATCH.base, other_time=MATCH.other),
        TEST(lambda before, base, other: within_noise(*speculating_and_not(before, base, other))),
    )
    def speculation_repays_nothing(self, d, before, base, other):
        """Speculation on times the same as off, within run-to-run noise: it is switched on only to be faster, by
        close to the tokens each cycle emits, so a cycle that emits several tokens yet gains nothing costs as many
        ordinary steps as it emits. Indicated: the delta is noise, so it bounds nothing; draft and verify times
        per cycle say which side of the cycle eats the yield."""
        on, off = speculating_and_not(before, base, other)
        unit = UNITS.get(d["figure"], "")
        return Finding(
            evidence=[ev("runs.speculative_on_time", on, unit), ev("runs.speculative_off_time", off, unit), ev("runs.figure", d["figure"])],
            missing=["speculation.verify_ms", "speculation.draft_ms"],
            detail=f"With speculation on the run takes {on:.4g} against {off:.4g} {unit} off: within {SLOWER - 1:.0%} either way, "
            "so what its cycles emit is spent on drafting and verifying.",
        )

    @rule(
        SPECS["speculation-slowdown"],
        AS.s << Speculation(draft_ms=MATCH.draft, ordinary_step_ms=MATCH.ordinary),
        AS.m << Metrics(),
        TEST(lambda s, m, draft, ordinary: draft + s.get("other_ms", 0.0) >= DRAFTING_SHARE * ordinary
             and cycle_yield(s, m) is not None and m.get("per_token_ms") is not None),
    )
    def drafting_eats_the_yield(self, s, m, draft, ordinary):
        """A cycle's drafting and bookkeeping, timed apart from its verify, take half an ordinary step or more: a
        drafter (one layer for an MTP head or EAGLE, a small model for a draft model) and the cycle's host work should
        cost a fraction of the step whose weights the verify reads anyway. Each cycle gives back that much of what its
        accepted tokens earn, whatever the acceptance; spread over the tokens a cycle emits it is what a token could
        lose at most if they cost nothing."""
        other, tokens, per_token = s.get("other_ms", 0.0), cycle_yield(s, m), m["per_token_ms"]
        overhead = draft + other
        return Finding(
            evidence=[ev("speculation.draft_ms", draft, "ms"), *([ev("speculation.other_ms", other, "ms")] if other else []),
                      ev("speculation.ordinary_step_ms", ordinary, "ms"), ev("emitted_tokens_per_cycle", tokens),
                      ev("metrics.per_token_ms", per_token, "ms")],
            removable_ms=min(overhead / tokens, per_token),
            step_ms=per_token,
            detail=f"Drafting and bookkeeping take {overhead:.4g} ms a cycle, {overhead / ordinary:.2g} ordinary steps, "
            f"against the {tokens:.3g} tokens a cycle emits.",
        )

    @rule(SPECS["speculation-slowdown"], *ablation("draft_length"))
    def longer_draft_slower(self, d):
        """Speculation on in both runs, and the longer draft is slower: each extra draft token costs drafting and a
        verify slot, and is rarely kept, so the draft length (or speculation itself) is past what acceptance repays."""
        return ablation_finding(d)

    @rule(
        SPECS["speculation-slowdown"],
        AS.s << Speculation(speedup=MATCH.speedup, expected_tokens=MATCH.tokens, ordinary_step_ms=MATCH.ordinary),
        TEST(lambda speedup: speedup < 1),
    )
    def speculation_slowdown(self, s, speedup, tokens, ordinary):
        per_token = ordinary / speedup
        context = s.get("context")
        reason = "long context" if context is not None and context >= LONG_CONTEXT else "low acceptance or costly cycles"
        return Finding(
            evidence=[
                ev("speculation.acceptance", s["acceptance"]),
                ev("speculation.draft_length", s["draft_length"]),
                ev("expected_tokens_per_cycle", tokens),
                ev("speedup", speedup),
            ]
            + ([ev("speculation.context", context)] if context is not None else []),
            removable_ms=per_token - ordinary,
            step_ms=per_token,
            detail=f"{speedup:.2f}x is a slowdown ({reason}); gains are per emitted token.",
        )

    @rule(
        SPECS["speculation-slowdown"],
        AS.s << Speculation(acceptance=MATCH.a, draft_length=MATCH.k),
        TEST(lambda s, a, k: "speedup" not in s and expected_tokens_per_cycle(a, k) < MIN_TOKENS_PER_CYCLE),
    )
    def speculation_mostly_discarded(self, s, a, k):
        """Costs unknown: the accepted-prefix model alone says the drafts are mostly thrown away."""
        tokens = expected_tokens_per_cycle(a, k)
        return Finding(
            evidence=[ev("speculation.acceptance", a), ev("speculation.draft_length", k), ev("expected_tokens_per_cycle", tokens)],
            detail=(
                f"At acceptance {a:g} a cycle of {k} drafts emits {tokens:.3g} tokens: {(tokens - 1) / k:.0%} of the drafts "
                "are kept. Draft and verify times would bound the loss."
            ),
        )

    @rule(
        SPECS["speculation-slowdown"],
        AS.s << Speculation(acceptance=MATCH.a),
        NOT(Speculation(draft_length=W())),
        TEST(lambda a: a < 1 and 1 / (1 - a) < MIN_TOKENS_PER_CYCLE),
    )
    def speculation_discarded_at_any_length(self, s, a):
        """Draft length unknown: 1 + a + a^2 + ... stays below 1 / (1 - a) however many tokens are drafted,
        so a low enough acceptance condemns every draft length."""
        most = 1 / (1 - a)
        return Finding(
            evidence=[ev("speculation.acceptance", a), ev("expected_tokens_per_cycle_at_most", most)],
            detail=f"At acceptance {a:g} no draft length emits more than {most:.3g} tokens per cycle.",
        )

    @rule(
        SPECS["speculation-low-acceptance"],
        AS.s << Speculation(acceptance_rate=MATCH.rate, ordinary_step_ms=MATCH.ordinary),
        AS.m << Metrics(),
        TEST(lambda s, m, ordinary: low_acceptance(s) and slower_than_ordinary(s, m, ordinary)),
    )
    def low_acceptance_against_ordinary(self, s, m, ordinary):
        """Time per token with speculation against the ordinary step of the same workload: the excess is what it costs
        (at least: the ordinary step timed with speculation on still pays its pipeline)."""
        per_token = time_per_token(s, m)
        return Finding(
            evidence=[*acceptance_evidence(s), *per_token_evidence(s, m), ev("speculation.ordinary_step_ms", ordinary, "ms")],
            removable_ms=per_token - ordinary,
            step_ms=per_token,
            at_least=True,
            detail=f"{kept(s)} Gains are per emitted token; the ordinary step pays the drafting pipeline too, so this is the least "
            "it costs, and a run with speculation off is the bound.",
        )

    @rule(
        SPECS["speculation-low-acceptance"],
        AS.s << Speculation(acceptance_rate=MATCH.rate),
        TEST(lambda s: low_acceptance(s) and not drafts_dearer_than(s, ROW_DEARER)),
        *ablation("speculative"),
    )
    def low_acceptance_measured(self, s, d):
        """Speculation on and off at the same load, with the counters saying why it is slower. Not where each
        further draft costs the cycle a step's worth (ROW_DEARER): no acceptance would repay such a draft."""
        finding = ablation_finding(d, *acceptance_evidence(s))
        finding.detail = f"{kept(s)} {finding.detail}"
        return finding

    @rule(
        SPECS["speculation-low-acceptance"],
        AS.s << Speculation(acceptance_rate=MATCH.rate),
        NOT(RunDiff(setting="speculative", includes_observed=P(lambda v: v is not False))),
        TEST(lambda s: low_acceptance(s) and "ordinary_step_ms" not in s),
    )
    def low_acceptance_from_counters(self, s):
        """The counters alone name the waste. An A/B of speculation itself either measures it or shows it repays; but
        one whose sides are both other runs than the one the counters were read on (another prompt set, another
        load) says nothing of these counters: acceptance follows the text."""
        return Finding(evidence=acceptance_evidence(s), detail=f"{kept(s)} An ordinary step or a run with speculation off would bound the loss.")

    @rule(
        SPECS["speculation-low-acceptance"],
        AS.s << Speculation(acceptance_rate=MATCH.rate, ordinary_step_ms=MATCH.ordinary),
        AS.m << Metrics(),
        NOT(RunDiff(setting="speculative")),
        TEST(lambda s, m, ordinary: low_acceptance(s) and faster_than_the_counters_allow(s, m, ordinary)),
    )
    def low_acceptance_windows_disagree(self, s, m, ordinary):
        """A cycle costs at least an ordinary step and emits e tokens, so the time per token is at least the ordinary
        step over e. A time per token well under that does not say speculation repays: it says the two figures come
        from windows that differ (a load's TPOT over a changing batch, a trace's step at one batch). The counters
        still name the cause; the loss is not bounded."""
        per_token, emitted = time_per_token(s, m), yield_per_cycle(s)
        return named_from_counters(s, m, ordinary,
                                   f"At {emitted:.3g} tokens a cycle no time per token can be under {ordinary / emitted:.3g} ms against a "
                                   f"{ordinary:.3g} ms ordinary step; the {per_token:.3g} ms measured is from another window, so it bounds "
                                   "nothing. A run with speculation off at the same load would.")

    @rule(
        SPECS["speculation-low-acceptance"],
        AS.s << Speculation(acceptance_rate=MATCH.rate, ordinary_step_ms=MATCH.ordinary),
        AS.m << Metrics(),
        NOT(RunDiff(setting="speculative")),
        TEST(lambda s, m, ordinary: low_acceptance(s) and within_noise_of_ordinary(s, m, ordinary)),
    )
    def low_acceptance_repays_nothing(self, s, m, ordinary):
        """The time per token is the ordinary step's, within noise: speculation repays nothing measurable. The ordinary
        step was timed with speculation on, so the pipeline's own cost (drafting, verifying the rejected drafts, the
        extra bookkeeping) is inside it: a run with speculation off is the only bound, and the counters name the
        cause meanwhile."""
        per_token, emitted = time_per_token(s, m), yield_per_cycle(s)
        return named_from_counters(s, m, ordinary,
                                   f"At {emitted:.3g} tokens a cycle speculation can repay at most {1 - 1 / emitted:.1%} of the time per "
                                   f"token ({per_token:.3g} ms against a {ordinary:.3g} ms step timed with speculation on), while its "
                                   "pipeline's cost is inside that step. A run with speculation off at the same load would bound the loss.")

    @rule(
        SPECS["speculation-low-acceptance"],
        AS.s << Speculation(acceptance_rate=MATCH.rate, ordinary_step_ms=W()),
        NOT(RunDiff(setting="speculative")),
        NOT(Metrics(tpot_p50_ms=W())),
        NOT(Metrics(tpot_mean_ms=W())),
        TEST(lambda s: low_acceptance(s)),
    )
    def low_acceptance_untimed(self, s):
        """An ordinary step, but no time per token with speculation to hold it against."""
        return Finding(evidence=acceptance_evidence(s), detail=f"{kept(s)} A time per output token (TPOT) would bound the loss.")

    @rule(
        SPECS["speculation-inactive-overhead"],
        Server(speculative=P(lambda m: bool(m)) & MATCH.method, speculative_active=False),
        NOT(HostCostFact(name="speculation", measured=True, ms_per_step=0)),
    )
    def speculation_inactive_overhead(self, method):
        """A speculation host cost measured at zero says the pipeline is off too: nothing to name."""
        return Finding(evidence=[ev("server.speculative", method), ev("server.speculative_active", False)])


def speculating_and_not(before: str, base: float, other: float) -> tuple[float, float]:
    """(time with speculation on, time with it off) of a speculation A/B, whichever run is the baseline."""
    return (other, base) if before == "false" else (base, other)


def ordinary_token_ms(s) -> float | None:
    """The time of an ordinary token: the swept run that drafted nothing, else the ordinary step the case states."""
    return s.get("draft_off_token_ms", s.get("ordinary_step_ms"))


def row_excess_ms(s) -> float | None:
    """What each further draft adds to a cycle beyond its drafting, where the draft time is stated (per draft, at the
    length the counters were read), else all of what it adds."""
    per_draft, k = s.get("per_draft_ms"), drafts_per_cycle(s)
    if per_draft is None:
        return None
    return per_draft - (s["draft_ms"] / k if "draft_ms" in s and k else 0.0)


def drafts_dearer_than(s, steps: float) -> bool:
    """Each further draft costs a cycle ``steps`` ordinary tokens or more, beyond any stated draft time."""
    excess, ordinary = row_excess_ms(s), ordinary_token_ms(s)
    return excess is not None and ordinary is not None and excess >= steps * ordinary


def within_noise(time: float, reference: float) -> bool:
    """Neither faster nor slower than the reference beyond run-to-run noise either way."""
    return reference / SLOWER <= time < SLOWER * reference


def named_from_counters(s, m, ordinary: float, why: str) -> Finding:
    """The counters name the cause; the time per token and the ordinary step are shown, and bound nothing."""
    return Finding(
        evidence=[*acceptance_evidence(s), *per_token_evidence(s, m), ev("speculation.ordinary_step_ms", ordinary, "ms")],
        detail=f"{kept(s)} {why}",
    )


def cycle_yield(s, m) -> float | None:
    """Tokens a cycle emits: as the counters measured them, else the timed cycle (draft, verify and the rest) over
    the time per token the stream saw."""
    found = yield_per_cycle(s)
    if found is not None or "cycle_ms" not in s or not m.get("per_token_ms"):
        return found
    return s["cycle_ms"] / m["per_token_ms"]


def drafts_per_cycle(s) -> float | None:
    """k: the drafted tokens per cycle the counters measured, else the configured draft length (a drafter drafts
    fewer than it may when its lookup finds no longer match, or when it adapts)."""
    return s.get("drafted_per_cycle", s.get("draft_length"))


def emitted_per_cycle(s) -> float | None:
    """Tokens a verify cycle emits: the bonus token plus the accepted share of its k drafts."""
    k, rate = drafts_per_cycle(s), s.get("acceptance_rate")
    return None if k is None or rate is None else 1 + k * rate


def none_accepted(s) -> bool:
    """Nothing accepted: each cycle emits only the verify's own token, whatever was drafted."""
    return s.get("acceptance_rate") == 0


def low_acceptance(s) -> bool:
    """The cycle keeps under MIN_KEPT_SHARE of the k+1 tokens it verifies, or under MIN_ACCEPTANCE of its drafts
    are accepted (or none are)."""
    emitted, rate = emitted_per_cycle(s), s.get("acceptance_rate")
    return (none_accepted(s) or (emitted is not None and emitted < MIN_KEPT_SHARE * (drafts_per_cycle(s) + 1))
            or (rate is not None and rate < MIN_ACCEPTANCE))


def in_window_per_token_ms(s) -> float | None:
    """Time per emitted token over the traced steps the ordinary step came from: their typical step (the verify
    cycle's median for the share that verified, the ordinary step's for the rest) over the tokens a sequence emits a
    step (its own plus the accepted share of what it drafted). One window, one batch, medians on both sides: a mean
    over the steps would count their outliers against the ordinary step's median (on the real n-gram fault, 11.32
    against 10.67 ms with plain and verify medians within 0.01 ms of each other)."""
    share, drafted, rate = s.get("verify_step_share"), s.get("drafted_per_sequence_step"), s.get("acceptance_rate")
    ordinary, verify = s.get("ordinary_step_ms"), s.get("verify_ms")
    if None in (share, drafted, rate, ordinary, verify):
        return None
    return ((1 - share) * ordinary + share * verify) / (1 + rate * drafted)


def time_per_token(s, m) -> float | None:
    """Time per output token with speculation on: from the trace's own window where it has one; else TPOT (a chunk
    interval is several tokens under speculation), whose load window differs from the trace's (a changing batch,
    its first and last steps) by more than the loss: on the real vLLM's n-gram fault it read 6.3 ms in one run and
    9.8 ms in another against 8.0-8.2 ms ordinary steps."""
    found = in_window_per_token_ms(s)
    return found if found is not None else m.get("tpot_p50_ms", m.get("tpot_mean_ms"))


def per_token_evidence(s, m) -> list:
    found = in_window_per_token_ms(s)
    if found is None:
        return [ev("metrics.tpot_ms", time_per_token(s, m), "ms")]
    return [ev("speculation.verify_ms", s["verify_ms"], "ms"), ev("speculation.verify_step_share", s["verify_step_share"]),
            ev("speculation.drafted_per_sequence_step", s["drafted_per_sequence_step"]), ev("per_token_in_window_ms", found, "ms")]


def yield_per_cycle(s) -> float | None:
    """Tokens a cycle emits, as the counters measured them (else from the acceptance and the drafts)."""
    return s.get("mean_accepted_per_cycle", emitted_per_cycle(s))


def faster_than_the_counters_allow(s, m, ordinary: float) -> bool:
    """The time per token is under the ordinary step over the measured yield, beyond noise: not a real repayment."""
    per_token, emitted = time_per_token(s, m), yield_per_cycle(s)
    return per_token is not None and emitted is not None and per_token * emitted * SLOWER < ordinary


def within_noise_of_ordinary(s, m, ordinary: float) -> bool:
    """Neither slower than the ordinary step nor faster than it, beyond run-to-run noise either way."""
    per_token = time_per_token(s, m)
    return per_token is not None and within_noise(per_token, ordinary)


def slower_than_ordinary(s, m, ordinary: float) -> bool:
    per_token = time_per_token(s, m)
    return per_token is not None and per_token >= SLOWER * ordinary


def acceptance_evidence(s) -> list:
    k = drafts_per_cycle(s)
    if k is None:
        return [ev("speculation.acceptance_rate", s["acceptance_rate"]), ev("emitted_tokens_per_cycle", 1)]
    return [
        ev("speculation.acceptance_rate", s["acceptance_rate"]),
        *[ev(f"speculation.{name}", s[name]) for name in ("drafted_per_cycle", "draft_length") if name in s],
        ev("emitted_tokens_per_cycle", emitted_per_cycle(s)),
        ev("verified_tokens_per_cycle", k + 1),
    ]


def kept(s) -> str:
    k, emitted = drafts_per_cycle(s), emitted_per_cycle(s)
    if k is None:
        return "No draft was accepted: every cycle emits only the verify's own token and pays for the drafting besides."
    allowed = s.get("draft_length")
    drafted = f"{k:.3g} drafted" + (f" (of {allowed:g} allowed)" if "drafted_per_cycle" in s and allowed and allowed != k else "")
    return (f"At {s['acceptance_rate']:.0%} of {drafted} accepted a cycle emits {emitted:.3g} of the {k + 1:.3g} tokens "
            f"it verifies ({emitted / (k + 1):.0%}).")
