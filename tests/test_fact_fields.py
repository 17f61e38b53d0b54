"""The declared fact fields: what the builders fill, what patterns may name, and `rules facts`."""

import json

import pytest

from conftest import REPO, run_cli
from diagnoser.engine.fact_fields import fact_table, unknown_field
from diagnoser.engine.facts import Budget, case_facts, with_derived_budget
from diagnoser.engine.fixtures import bundled_fixtures, fixture_files, load_fixtures
from diagnoser.engine.runner import compute_bound_summary
from diagnoser.experta_compat import Fact
from diagnoser.models.case import load_case


def _cases():
    yield from (fx.case for f in fixture_files(bundled_fixtures()) for fx in load_fixtures(f))
    for folder in ("cases", "holdout", "unseen"):
        yield from (load_case(p) for p in sorted((REPO / "tests" / "data" / folder).glob("[DEHU][0-9][0-9].yaml")))


def test_every_fact_the_engine_builds_carries_only_declared_fields():
    table = fact_table()
    seen = set()
    for case in _cases():
        case = with_derived_budget(case)
        for fact in case_facts(case, compute_bound_summary(case)):
            fields = {k for k in fact if not Fact.is_special(k)}
            undeclared = fields - set(table[type(fact)])
            assert not undeclared, f"{type(fact).__name__}: {sorted(undeclared)}"
            seen.add(type(fact))
    assert len(seen) >= 25  # the corpus and fixtures exercise nearly every fact class


def test_a_misspelt_field_names_the_nearest_one():
    assert unknown_field(Budget, "launch_ms") is None
    assert unknown_field(Budget, "launch_mss") == "Budget has no field 'launch_mss' (nearest: launch_ms)"
    assert unknown_field(Budget, "zzz") == "Budget has no field 'zzz'"


def test_a_rule_file_with_a_misspelt_field_is_one_line_exit_2(tmp_path):
    rules = tmp_path / "mine.py"
    rules.write_text(
        "from diagnoser.engine import MATCH, Budget, Finding, RuleSet, RuleSpec, ev, rule\n"
        "SPEC = RuleSpec(id='my-launch', title='t', explanation='e')\n"
        "class Mine(RuleSet):\n"
        "    @rule(SPEC, Budget(launch_mss=MATCH.launch))\n"
        "    def mine(self, launch):\n"
        "        return Finding(evidence=[ev('x', launch)])\n"
    )
    out = run_cli("diagnose", str(REPO / "examples" / "case-moe-small-experts.yaml"), "--rules", str(rules))
    assert out.returncode == 2
    assert out.stderr.strip() == f"diagnoser: error: {rules}: rule my-launch: Budget has no field 'launch_mss' (nearest: launch_ms)"


def test_rules_facts_prints_units_meanings_and_derived_fields():
    out = run_cli("rules", "facts", "Budget")
    assert out.returncode == 0
    assert "  launch_ms [ms]: GPU idle because the next launch was not yet issued" in out.stdout
    assert "  parts_ms [ms] (derived): sum of the budget's parts" in out.stdout
    doc = json.loads(run_cli("rules", "facts", "--json").stdout)
    metrics = {row["field"]: row for row in doc["Metrics"]}
    assert metrics["tpot_p50_ms"]["unit"] == "ms" and metrics["output_tokens_per_s"]["unit"] == "tokens/s"
    bad = run_cli("rules", "facts", "Metric")
    assert bad.returncode == 2 and "no fact 'Metric' (nearest: Metrics)" in bad.stderr


def test_flags_counts_and_shares_have_units_too():
    out = run_cli("rules", "facts", "Memory").stdout
    assert "  weights_fit_without_offload [true/false]: " in out and "  kv_cache_usage [fraction]: " in out
    assert "  preemptions [count]: " in out and "  waiting_requests [count]: " in out
    every = [i for fields in fact_table().values() for i in fields.values()]
    unknown = [i.name for i in every if not i.unit]
    assert len(unknown) <= 0.1 * len(every), unknown  # 29 of 315: mixed figures (a run's time per unit) and derived labels
    units = {i.name: i.unit for i in every}
    assert units["itl_growth_ms_per_1k_output"] == "ms per 1k output" and units["captured_batch_sizes"] == "list of count"


@pytest.mark.parametrize("fact", sorted(c.__name__ for c in fact_table()))
def test_every_field_says_what_it_is(fact):
    fields = next(v for c, v in fact_table().items() if c.__name__ == fact)
    assert fields and all(info.meaning for info in fields.values()), [n for n, i in fields.items() if not i.meaning]


def test_a_bare_number_in_a_python_test_is_refused_and_body_thresholds_are_shown(tmp_path):
    rules = tmp_path / "mine.py"
    rules.write_text(
        "from diagnoser.engine import MATCH, TEST, Budget, Finding, RuleSet, RuleSpec, ev, rule\n"
        "SPEC = RuleSpec(id='my-host', title='t', explanation='e')\n"
        "class Mine(RuleSet):\n"
        "    @rule(SPEC, Budget(host_ms=MATCH.host), TEST(lambda host: host > 0.3))\n"
        "    def mine(self, host):\n"
        "        return Finding(evidence=[ev('x', host)])\n"
    )
    out = run_cli("diagnose", str(REPO / "examples" / "case-moe-small-experts.yaml"), "--rules", str(rules))
    assert out.returncode == 2 and "rule my-host: bare number 0.3 in a TEST: name it" in out.stderr
    # scheduler-overhead compares with SCHEDULER_SHARE in its body, not in a TEST: still listed
    import yaml

    shown = yaml.safe_load(run_cli("rules", "show", "scheduler-overhead").stdout)
    assert shown["thresholds"]["SCHEDULER_SHARE"]["value"] == 0.3
    assert yaml.safe_load(run_cli("rules", "show", "exposed-comm").stdout)["thresholds"]["MIN_COMM_MS"]["value"] == 0.1


def test_a_threshold_a_rule_reads_must_be_declared_with_its_value(tmp_path):
    module = tmp_path / "mine.py"
    module.write_text(
        "from diagnoser.engine import MATCH, TEST, Budget, Finding, RuleSet, ev, load_specs, rule\n"
        "SPECS = load_specs(__file__)\n"
        "# Over a third of the step on the host is more than scheduling.\n"
        "HOST_SHARE = 0.3\n"
        "class Mine(RuleSet):\n"
        "    @rule(SPECS['my-host'], Budget(host_ms=MATCH.host, step_ms=MATCH.step), TEST(lambda host, step: host > HOST_SHARE * step))\n"
        "    def mine(self, host, step):\n"
        "        return Finding(evidence=[ev('budget.host_ms', host)])\n"
    )
    spec = tmp_path / "mine.yaml"
    case = str(REPO / "examples" / "case-moe-small-experts.yaml")
    for text, message in (
        ("my-host: {title: t, explanation: e}\n", "rule my-host: reads threshold HOST_SHARE but its spec does not declare it"),
        ("my-host: {title: t, explanation: e, thresholds: {HOST_SHARE: {value: 0.25, why: w}}}\n",
         "rule my-host: threshold HOST_SHARE is declared 0.25 but the rule reads 0.3"),
        ("my-host: {title: t, explanation: e, thresholds: {HOST_SHARE: {value: 0.3, why: w}, OTHER: {value: 1, why: w}}}\n",
         "rule my-host: declares threshold OTHER but never reads it"),
    ):
        spec.write_text(text)
        out = run_cli("diagnose", case, "--rules", str(module))
        assert out.returncode == 2 and message in out.stderr, out.stderr
    spec.write_text("my-host: {title: t, explanation: e, thresholds: {HOST_SHARE: {value: 0.3, unit: fraction, why: w}}}\n")
    assert run_cli("diagnose", case, "--rules", str(module)).returncode == 0
