"""`rules explain`: why a rule concluded or stayed silent, checked against the engine itself."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import REPO, run_cli
from diagnoser.engine import load_rulebook
from diagnoser.engine.explain import explain_rules, rule_thresholds
from diagnoser.engine.fixtures import load_fixtures
from diagnoser.engine.runner import run_engine
from diagnoser.errors import InputError
from diagnoser.models.case import Case

EXAMPLE = REPO / "examples" / "case-moe-small-experts.yaml"
FIXTURES = [fx for path in sorted((REPO / "rules" / "fixtures").glob("*.yaml")) for fx in load_fixtures(path)]


@pytest.fixture(scope="module")
def book():
    return load_rulebook()


def one(case: dict, rule_id: str, book):
    (explanation,) = explain_rules(Case.model_validate(case), book, [rule_id])
    return explanation


def test_a_concluding_rule_shows_the_values_that_matched(book):
    x = one({"observations": {"budget": {"step_ms": 9, "device_ms": 5.5, "launch_ms": 2.5, "host_ms": 1}}}, "launch-gaps", book)
    assert x.outcome == "concluded" and x.hypotheses == ["launch-gaps"] and x.missing_inputs == []
    body = next(b for b in x.bodies if b.body == "launch_gaps")
    assert body.matched and body.defined_at.startswith("launch.py:")
    budget, test = body.conditions
    assert budget.holds and budget.detail == "Budget(launch_ms=2.5, step_ms=9)"
    assert test.holds and test.detail == "true for launch=2.5, step=9 (MIN_PART_MS=0.1, MIN_PART_SHARE=0.08)"


def test_a_near_miss_names_the_false_test_and_its_values(book):
    # 0.5 ms of launch gaps in a 9 ms step is under the 8 % share the rule asks for
    x = one({"observations": {"budget": {"step_ms": 9, "device_ms": 7.5, "launch_ms": 0.5, "host_ms": 1}}}, "launch-gaps", book)
    assert x.outcome == "silent"
    budget, test = x.bodies[0].conditions
    assert budget.holds and not test.holds and test.detail == "false for launch=0.5, step=9 (MIN_PART_MS=0.1, MIN_PART_SHARE=0.08)"
    assert test.condition.startswith("TEST(launch, step) at launch.py:")


def test_absent_facts_and_unmeasured_fields_are_named(book):
    x = one({"observations": {"budget": {"step_ms": 9, "device_ms": 9}}}, "late-rank", book)
    assert x.outcome == "silent" and x.missing_inputs == ["collectives"]
    (cond,) = x.bodies[0].conditions
    assert not cond.holds and cond.detail == "the case has no Collective fact"
    moe = {"kernel_class": "moe", "share_of_step": 0.6}  # nobody said whether a tuned config was found
    case = {"observations": {"budget": {"step_ms": 9, "device_ms": 9}, "kernel_classes": [moe]}}
    bodies = {b.body: b for b in one(case, "moe-untuned-config", book).bodies}
    cond = bodies["moe_untuned_config"].conditions[0]
    assert not cond.holds and cond.detail == "tuned_config was not measured"
    (runs,) = [c for c in bodies["moe_config_measured"].conditions if not c.holds]
    assert runs.detail == "the case has no RunDiff fact; the case has no ConfoundedChange fact"


def test_a_refinement_waits_for_its_parent(book):
    # graphs are off, but no launch gap was measured, so launch-gaps never held
    x = one({"observations": {"server": {"cuda_graphs": False}, "budget": {"step_ms": 9, "device_ms": 9}}}, "graphs-off", book)
    assert x.parent == "launch-gaps" and x.outcome == "silent"
    by_flag = next(b for b in x.bodies if b.body == "graphs_off_by_flag")
    server, parent = by_flag.conditions
    assert server.holds and server.detail == "Server(cuda_graphs=False)"
    assert not parent.holds and parent.detail == "cause launch-gaps did not conclude; cause launch-gaps has its inputs, so it decides"
    by_trace = next(b for b in x.bodies if b.body == "graphs_off_in_trace")
    assert by_trace.conditions[0].detail == "the case has no Graph fact"


def test_alternatives_that_all_fail_are_each_said(book):
    x = one({"observations": {"budget": {"step_ms": 9, "device_ms": 9}}}, "smaller-tp-same-calls", book)
    (cond,) = x.bodies[0].conditions
    assert " OR " in cond.condition and not cond.holds
    assert cond.detail == "cause exposed-comm did not conclude; the case has no Claim fact"


def test_declined_and_raising_bodies_are_told_apart(tmp_path):
    rules = tmp_path / "mine.py"
    rules.write_text(
        "from diagnoser.engine import MATCH, Budget, Finding, RuleSet, RuleSpec, rule\n"
        "DECLINES = RuleSpec(id='declines', title='t', explanation='e')\n"
        "RAISES = RuleSpec(id='raises', title='t', explanation='e')\n"
        "class Mine(RuleSet):\n"
        "    @rule(DECLINES, Budget(step_ms=MATCH.step))\n"
        "    def declines(self, step):\n"
        "        return None\n"
        "    @rule(RAISES, Budget(step_ms=MATCH.step))\n"
        "    def raises(self, step):\n"
        "        raise ZeroDivisionError('boom')\n"
    )
    book = load_rulebook([rules])
    case = Case.model_validate({"observations": {"budget": {"step_ms": 9, "device_ms": 9}}})
    declined, raised = explain_rules(case, book, ["declines", "raises"])
    assert declined.outcome == "declined" and declined.bodies[0].matched
    assert raised.outcome == "raised" and raised.error == "ZeroDivisionError: boom"


def test_thresholds_are_read_from_the_tests_and_their_helpers(book):
    # the kernel-sum guard reads OVERCOUNT directly and SAME_FIGURE through same_figure();
    # showing them would have exposed a second SAME_FIGURE = 0.05 that once overrode the 0.1
    assert rule_thresholds(book, "kernel-sum-as-elapsed") == {"OVERCOUNT": 1.05, "SAME_FIGURE": 0.1}
    # it concludes on literals alone, except when it reads a graphs on/off A/B: then a run must be slower beyond noise
    # (what benchmarks repeat within, or twice the runs' own repeat spread)
    assert rule_thresholds(book, "graphs-off") == {"BEYOND_REPEATS": 2.0, "SLOWER": 1.05}
    shown = yaml.safe_load(run_cli("rules", "show", "launch-gaps").stdout)
    assert {k: v["value"] for k, v in shown["thresholds"].items()} == {
        "BEYOND_REPEATS": 2.0, "LAUNCH_PACED_SHARE": 0.5, "MIN_LAUNCH_US": 5.0, "MIN_PART_MS": 0.1, "MIN_PART_SHARE": 0.08,
        "SLOWER": 1.05, "SLOW_LAUNCH_US": 100.0,
    }
    assert all(v["why"] for v in shown["thresholds"].values())


def test_unknown_rule_is_bad_input(book):
    with pytest.raises(InputError, match="no rule 'nope'"):
        explain_rules(Case(), book, ["nope"])


def test_explainer_agrees_with_the_engine_on_every_fixture_and_rule(book):
    """The replay must say "matched" exactly when experta activated the rule: across all
    bundled fixtures and all rules, a disagreement in either direction fails here."""
    disagreements, activations = [], 0
    for fixture in FIXTURES:
        engine, _, _ = run_engine(fixture.case, book)
        fired = set(engine.fired)
        activations += len(fired)
        for x in explain_rules(fixture.case, book, sorted(book.specs)):
            matched = any(b.matched for b in x.bodies)
            if matched != (x.rule in fired):
                disagreements.append(f"{fixture.name}: {x.rule} explainer matched={matched}, engine fired={x.rule in fired}")
    assert disagreements == []
    assert activations > len(FIXTURES)  # the check ran over real firings (84 when written), not an empty set


def test_cli_text_json_and_errors():
    result = run_cli("rules", "explain", "launch-gaps", str(EXAMPLE))
    assert result.returncode == 0
    assert "verdict: concluded: launch-gaps" in result.stdout and "true for launch=1.5, step=16" in result.stdout
    result = run_cli("rules", "explain", "graphs-off", str(EXAMPLE), "--json")
    data = json.loads(result.stdout)
    by_flag = next(b for b in data["bodies"] if b["body"] == "graphs_off_by_flag")
    assert data["outcome"] == "silent" and by_flag["conditions"][0]["detail"] == "cuda_graphs=True is not False"
    result = run_cli("rules", "explain", "nope", str(EXAMPLE))
    assert result.returncode == 2 and result.stderr.strip() == "diagnoser: error: no rule 'nope'; `diagnoser rules list` shows the ids"


def test_overview_of_every_rule(book):
    result = run_cli("rules", "explain", "--all", str(EXAMPLE))
    assert result.returncode == 0
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert set(lines) == set(book.specs)
    assert lines["small-expert-kernels"].split()[1:4] == ["cause", "concluded", "small-expert-kernels"]
    assert lines["host-overhead"].endswith("false for host=0.9, step=16 (MIN_PART_MS=0.1, MIN_PART_SHARE=0.08)")
    assert lines["late-rank"].endswith("the case has no Collective fact")
    data = json.loads(run_cli("rules", "explain", "--all", str(EXAMPLE), "--json").stdout)
    assert {x["rule"]: x["outcome"] for x in data}["launch-gaps"] == "concluded" and len(data) == len(book.specs)


@pytest.mark.parametrize("args", [("explain", str(EXAMPLE)), ("explain", "--all", "launch-gaps", str(EXAMPLE)), ("explain",)])
def test_explain_arguments_are_checked(args):
    result = run_cli("rules", *args)
    assert result.returncode == 2
    assert result.stderr.strip() == "diagnoser: error: usage: diagnoser rules explain ID CASE, or diagnoser rules explain --all CASE"
