"""A user's rule file is a guest: one that loops, prints or exits costs the report that rule, never the run."""

import json

import pytest

from conftest import run_cli

SPEC = """{{"id": "{rule_id}", "title": "a guest rule", "explanation": "x",
  "check": {{"measure": "m", "confirms": "c", "refutes": "r"}},
  "remedies": [{{"action": "a", "cost": "c", "risk": "r"}}],
  "undo": [{{"metric": "per_user_latency", "revert_if": "r"}}]}}"""

RULES = '''
import sys
from diagnoser.engine import MATCH, TEST, Budget, Finding, RuleSet, RuleSpec, ev, rule

def spec(rule_id):
    return RuleSpec.model_validate_json(SPEC.format(rule_id=rule_id))

SPEC = {spec!r}

class Guests(RuleSet):
    @rule(spec("loops-in-body"), Budget(step_ms=MATCH.step))
    def loops_in_body(self, step):
        while True:
            try:
                pass
            except Exception:  # a rule that swallows errors still cannot keep the alarm
                pass

    @rule(spec("loops-in-test"), Budget(step_ms=MATCH.step), TEST(lambda step: _forever()))
    def loops_in_test(self, step):
        return None

    @rule(spec("prints"), Budget(step_ms=MATCH.step))
    def prints(self, step):
        print("a rule talking on stdout")
        return Finding(evidence=[ev("budget.step_ms", step)])

    @rule(spec("exits"), Budget(step_ms=MATCH.step))
    def exits(self, step):
        sys.exit(0)

def _forever():
    while True:
        pass
'''


@pytest.fixture()
def guest_rules(tmp_path):
    path = tmp_path / "guests.py"
    path.write_text(RULES.format(spec=SPEC))
    return path


def test_looping_printing_and_exiting_rules_are_rule_errors(tmp_path, guest_rules):
    case = tmp_path / "case.yaml"
    case.write_text("observations:\n  budget: {step_ms: 10, device_ms: 5, launch_ms: 5}\n")
    out = run_cli("diagnose", str(case), "--rules", str(guest_rules), "--json")
    assert out.returncode == 0, out.stderr
    diagnosis = json.loads(out.stdout)  # stdout is still one clean JSON document
    errors = {e["rule"]: e["error"] for e in diagnosis["rule_errors"]}
    assert "RuleTimeout" in errors["loops-in-body"] and "RuleTimeout" in errors["loops-in-test"]
    assert "SystemExit" in errors["exits"]
    assert "a rule talking on stdout" in out.stderr
    fired = {h["rule"] for h in diagnosis["hypotheses"]}
    assert "prints" in fired
    assert any(rule != "prints" for rule in fired)  # the bundled rules still ran


@pytest.mark.parametrize("body,needle", [
    ("while True:\n    pass\n", "RuleTimeout"),
    ("import sys\nsys.exit(3)\n", "SystemExit"),
])
def test_a_rule_file_that_hangs_or_exits_while_loading_is_bad_input(tmp_path, body, needle):
    path = tmp_path / "bad.py"
    path.write_text(body)
    case = tmp_path / "case.yaml"
    case.write_text("observations:\n  budget: {step_ms: 10, device_ms: 5, launch_ms: 5}\n")
    out = run_cli("diagnose", str(case), "--rules", str(path))
    assert out.returncode == 2 and needle in out.stderr and len(out.stderr.strip().splitlines()) == 1
