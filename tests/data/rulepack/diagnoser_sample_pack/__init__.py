"""A sample rule pack: a guard on windows whose steps vary too much to stand for one step.

diagnoser finds it through the ``diagnoser.rules`` entry point; ``FIXTURES`` tells `diagnoser
rules test` where its fixtures are.
"""

from pathlib import Path

from diagnoser.engine import MATCH, TEST, Budget, Finding, RuleSet, ev, load_specs, rule

SPECS = load_specs(__file__)
FIXTURES = Path(__file__).parent / "fixtures"

# Steps whose p90 - p10 spread exceeds half the step are two kinds of step, not one with noise.
SPREAD_SHARE = 0.5


class SamplePackRules(RuleSet):
    @rule(
        SPECS["step-spread-wide"],
        Budget(step_spread_ms=MATCH.spread, step_ms=MATCH.step),
        TEST(lambda spread, step: spread > SPREAD_SHARE * step),
    )
    def step_spread_wide(self, spread, step):
        return Finding(evidence=[ev("budget.step_spread_ms", spread, "ms"), ev("budget.step_ms", step, "ms")])
