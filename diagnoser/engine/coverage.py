"""How well fixtures pin the rules down: which rules no fixture fires, which have no near miss,
and which have thresholds no near miss tests.

A near miss "tests a threshold" when the rule's facts were all there and its furthest match
stopped at a TEST: the case was decided by a cut-off, not by a missing input. A rule whose
thresholds no such fixture touches could have any values and its fixtures would still pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from diagnoser.engine.explain import explain_rules, thresholds_by_rule
from diagnoser.engine.fixtures import Diagnosed
from diagnoser.engine.loader import Rulebook


@dataclass
class Coverage:
    rules: list[str]
    fired: set[str] = field(default_factory=set)
    near_missed: set[str] = field(default_factory=set)
    threshold_tested: set[str] = field(default_factory=set)
    with_thresholds: set[str] = field(default_factory=set)

    @property
    def never_fired(self) -> list[str]:
        return [r for r in self.rules if r not in self.fired]

    @property
    def no_near_miss(self) -> list[str]:
        return [r for r in self.rules if r not in self.near_missed]

    @property
    def thresholds_untested(self) -> list[str]:
        return [r for r in self.rules if r in self.with_thresholds and r not in self.threshold_tested]


def coverage(diagnosed: list[Diagnosed], rulebook: Rulebook, only: set[str] | None = None) -> Coverage:
    """Coverage of ``only`` (rule ids; default all loaded rules) by these fixtures."""
    report = Coverage(rules=sorted(only if only is not None else rulebook.specs))
    reads = thresholds_by_rule(rulebook)
    report.with_thresholds = {r for r in report.rules if reads[r]}
    for one in diagnosed:
        report.fired |= {h.rule for h in one.diagnosis.hypotheses}
        silent = [r for r in one.fixture.silent if r in rulebook.specs]
        report.near_missed |= set(silent)
        tested = [r for r in silent if r in report.with_thresholds and r not in report.threshold_tested]
        if tested:
            for x in explain_rules(one.fixture.case, rulebook, tested):
                if x.stopped_at.startswith("TEST("):
                    report.threshold_tested.add(x.rule)
    return report
