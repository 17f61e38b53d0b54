"""Threshold overrides: a sensitivity run changes cut-offs for that run only; no module is changed."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from diagnoser.engine import diagnose, load_rulebook
from diagnoser.engine.thresholds import parse_threshold, rule_modules, thresholds_set
from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.rules import launch

# the near-miss launch fixture: 0.3 ms of launch gaps and 0.3 ms of host in a 9 ms step (3.3 %)
NEAR_MISS = {"observations": {"budget": {"step_ms": 9, "device_ms": 8.2, "exposed_comm_ms": 0.2, "launch_ms": 0.3, "host_ms": 0.3}}}


def causes(d):
    return {h.rule for h in d.hypotheses if h.kind.value == "cause"}


def test_a_lower_cut_off_changes_the_conclusion_for_that_run_and_no_module_changes():
    book = load_rulebook()
    case = Case.model_validate(NEAR_MISS)
    assert "launch-gaps" not in causes(diagnose(case, book))
    with thresholds_set(book, {"launch.MIN_PART_SHARE": 0.03}) as before:
        assert before == {"launch.MIN_PART_SHARE": 0.08} and launch.MIN_PART_SHARE == 0.08
        assert {"launch-gaps", "host-overhead"} <= causes(diagnose(case, book))
    assert launch.MIN_PART_SHARE == 0.08
    assert "launch-gaps" not in causes(diagnose(case, book))


def test_rule_name_changes_one_rule_and_two_runs_in_one_process_differ():
    """launch-gaps and host-overhead read the same MIN_PART_SHARE; RULE.NAME lowers it for one of them."""
    book = load_rulebook()
    case = Case.model_validate(NEAR_MISS)
    with thresholds_set(book, {"launch-gaps.MIN_PART_SHARE": 0.03}) as before:
        one = causes(diagnose(case, book))
    with thresholds_set(book, {"host-overhead.MIN_PART_SHARE": 0.03}):
        other = causes(diagnose(case, book))
    assert before == {"launch-gaps.MIN_PART_SHARE": 0.08}
    assert "launch-gaps" in one and "host-overhead" not in one
    assert "host-overhead" in other and "launch-gaps" not in other
    assert launch.MIN_PART_SHARE == 0.08
    known = "BEYOND_REPEATS, LAUNCH_PACED_SHARE, MIN_LAUNCH_US, MIN_PART_MS, MIN_PART_SHARE, SLOWER, SLOW_LAUNCH_US"
    with pytest.raises(InputError, match=f"rule launch-gaps has no threshold 'GIL_BUSY' \\(thresholds: {known}\\)"):
        with thresholds_set(book, {"launch-gaps.GIL_BUSY": 0.1}):
            pass


def test_overrides_end_with_the_run_even_when_it_fails():
    book = load_rulebook()
    with pytest.raises(RuntimeError):
        with thresholds_set(book, {"launch.MIN_PART_SHARE": 0.5, "launch.MIN_PART_MS": 9.0}):
            raise RuntimeError("boom")
    assert (launch.MIN_PART_SHARE, launch.MIN_PART_MS) == (0.08, 0.1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("launch.MIN_PART_SHARE", "expected RULE.NAME=VALUE or MODULE.NAME=VALUE"),
        ("MIN_PART_SHARE=0.1", "expected RULE.NAME=VALUE or MODULE.NAME=VALUE"),
        ("launch.MIN_PART_SHARE=lots", "'lots' is not a number"),
    ],
)
def test_malformed_settings(text, message):
    with pytest.raises(InputError, match=message):
        parse_threshold(text)


def test_unknown_module_or_name_lists_what_exists():
    book = load_rulebook()
    with pytest.raises(InputError, match=r"no rule or rule module 'lunch' \(modules: capacity, collectives, .*launch"):
        with thresholds_set(book, {"lunch.MIN_PART_SHARE": 0.1}):
            pass
    # lower-case names and non-numbers (SPECS) are not thresholds
    with pytest.raises(InputError, match=r"launch has no threshold 'SPECS' \(thresholds: COMPUTING_CORES, DEVICE_STEP_CEILING_MS, DRAFT_STEP_SHARE, FIXED_COST_RATIO, FIXED_STEP_MS, IDLE_DEVICE, IDLE_GAP_MS"):
        with thresholds_set(book, {"launch.SPECS": 1.0}):
            pass


def test_cli_reports_the_change(tmp_path):
    case = tmp_path / "case.json"
    case.write_text(json.dumps(NEAR_MISS))
    out = run_cli("diagnose", str(case), "--threshold", "launch.MIN_PART_SHARE=0.03")
    assert out.returncode == 0 and "Thresholds changed for this run: launch.MIN_PART_SHARE 0.08 -> 0.03" in out.stdout
    d = json.loads(run_cli("diagnose", str(case), "--threshold", "launch.MIN_PART_SHARE=0.03", "--json").stdout)
    assert d["thresholds_changed"] == {"launch.MIN_PART_SHARE": [0.08, 0.03]}
    assert "launch-gaps" in {h["rule"] for h in d["hypotheses"]}
    x = run_cli("rules", "explain", "launch-gaps", str(case), "--threshold", "launch.MIN_PART_SHARE=0.03")
    assert "true for launch=0.3, step=9 (MIN_PART_MS=0.1, MIN_PART_SHARE=0.03)" in x.stdout
    bad = run_cli("diagnose", str(case), "--threshold", "launch.NOPE=1")
    assert bad.returncode == 2 and bad.stderr.startswith("diagnoser: error: --threshold launch.NOPE: launch has no threshold")


def test_a_user_module_that_shares_a_bundled_name_is_named_in_full(tmp_path):
    user = tmp_path / "launch.py"
    user.write_text(
        "from diagnoser.engine import MATCH, TEST, Budget, Finding, RuleSet, RuleSpec, ev, rule\n"
        "MIN_X = 100.0\n"
        "SPEC = RuleSpec.model_validate({'id': 'user-x', 'title': 't', 'explanation': 'e',\n"
        "                                'thresholds': {'MIN_X': {'value': 100.0, 'unit': 'ms', 'why': 'a sample cut-off'}}})\n"
        "class Mine(RuleSet):\n"
        "    @rule(SPEC, Budget(step_ms=MATCH.step), TEST(lambda step: step > MIN_X))\n"
        "    def user_x(self, step):\n"
        "        return Finding(evidence=[ev('budget.step_ms', step)])\n"
    )
    book = load_rulebook([user])
    full = next(name for name in rule_modules(book) if name.startswith("diagnoser_user_rules_launch_"))
    case = Case.model_validate(NEAR_MISS)
    assert "user-x" not in causes(diagnose(case, book))
    with thresholds_set(book, {f"{full}.MIN_X": 1.0}) as before:
        assert before == {f"{full}.MIN_X": 100.0}
        assert "user-x" in causes(diagnose(case, book))


GENERATOR_CUT = 0.5


def _cut_in_a_generator(values):
    return any(v >= GENERATOR_CUT for v in values)


def test_a_cut_off_read_inside_a_generator_expression_is_seen():
    """A comprehension is code of its own: a cut-off read there (or by a helper called there) is still one the rule
    reads, so the loader's declared-thresholds check and the explanations see it."""
    from diagnoser.engine.explain import thresholds_by_rule, thresholds_used

    assert thresholds_used(_cut_in_a_generator) == {"GENERATOR_CUT": 0.5}
    # rate-kind-mismatch's body asks aggregate_fell, which reads SLOWER, inside a generator expression
    assert thresholds_by_rule(load_rulebook())["rate-kind-mismatch"]["SLOWER"] == 1.05
