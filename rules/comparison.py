"""What A/B runs say: a slowdown that follows one changed setting is located there.

Most reports carry a comparison, not a trace: two versions, a flag on and off, a sweep. When
exactly one named setting differs, the measured delta belongs to that change, which bounds
the most that undoing or fixing it can buy; it says where the time went, not what spends it,
so it ranks after a mechanism with equal evidence. When several settings differ the delta
cannot be pinned on any one of them.
"""

from diagnoser.engine import AS, MATCH, TEST, Finding, RuleSet, RunDiff, ev, load_specs, rule
from diagnoser.models.serving import WORKLOAD_SETTINGS

SPECS = load_specs(__file__)

# Serving benchmarks repeat within a few percent; a 5 % slower run on the same figure is a change.
SLOWER = 1.05

UNITS = {"per_token_ms": "ms per token", "per_user_tokens_per_s": "ms per token", "output_tokens_per_s": "ms per token (aggregate)", "duration_s": "s"}


def _delta_evidence(d) -> list:
    unit = UNITS.get(d["figure"], "")
    return [
        ev("runs.baseline", d["base"]),
        ev("runs.slower", d["other"]),
        ev("runs.figure", d["figure"]),
        ev("runs.baseline_time", d["base_time"], unit),
        ev("runs.slower_time", d["other_time"], unit),
        ev("runs.ratio", d["ratio"]),
    ]


class ComparisonRules(RuleSet):
    @rule(
        SPECS["regression-located"],
        AS.d << RunDiff(setting=MATCH.setting, ratio=MATCH.ratio, before=MATCH.before, after=MATCH.after),
        TEST(lambda setting, ratio: setting != "several" and setting not in WORKLOAD_SETTINGS and ratio >= SLOWER),
    )
    def regression_located(self, d, setting, ratio, before, after):
        """Several runs changing the same setting give one hypothesis per setting: the largest delta ranks first."""
        return Finding(
            evidence=[ev("runs.changed", setting), ev("runs.before", before), ev("runs.after", after), *_delta_evidence(d)],
            removable_ms=d["other_time"] - d["base_time"],
            step_ms=d["other_time"],
            key=setting,
            detail=f"Only {setting} differs ({before} -> {after}) and the run is {ratio:.2f}x slower on {d['figure']}; "
            "gains are shares of the slower run's time per unit of work.",
        )

    @rule(
        SPECS["confounded-comparison"],
        RunDiff(setting="several", ratio=MATCH.ratio, changed=MATCH.changed),
        TEST(lambda ratio: ratio >= SLOWER),
    )
    def confounded(self, ratio, changed):
        return Finding(evidence=[ev("runs.changed", ", ".join(changed)), ev("runs.ratio", ratio)])
