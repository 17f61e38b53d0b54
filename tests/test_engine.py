"""The engine: loading and linting rule packs, error isolation, parent gating, deterministic order."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, run_cli
from diagnoser.engine import diagnose, load_rulebook
from diagnoser.engine.explain import explain_rules
from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.hypothesis import Kind

HEADER = """
from diagnoser.engine import MATCH, TEST, Budget, Check, Finding, Kind, RuleSet, RuleSpec, ev, rule
"""

RAISING_PACK = HEADER + '''
BOOM = RuleSpec(id="boom", title="A rule with a bug", explanation="divides by zero")
QUIET = RuleSpec(id="always-launch", title="Launch share seen", kind=Kind.lesson, explanation="fires on any budget")

class Broken(RuleSet):
    @rule(BOOM, Budget(step_ms=MATCH.step))
    def boom(self, step):
        return Finding(evidence=[ev("x", step / 0)])

    @rule(QUIET, Budget(launch_ms=MATCH.launch))
    def always_launch(self, launch):
        return Finding(evidence=[ev("budget.launch_ms", launch)])
'''

LAUNCH_CASE = {
    "observations": {
        "budget": {"step_ms": 9, "device_ms": 4.5, "exposed_comm_ms": 2, "launch_ms": 1.5, "host_ms": 1},
        "server": {"cuda_graphs": False},
    }
}


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_raising_rule_is_reported_and_the_others_still_run(tmp_path):
    pack = write(tmp_path, "broken.py", RAISING_PACK)
    d = diagnose(Case.model_validate(LAUNCH_CASE), load_rulebook([pack]))
    assert [(e.rule, e.error) for e in d.rule_errors] == [("boom", "ZeroDivisionError: float division by zero")]
    fired = {h.rule for h in d.hypotheses}
    assert {"launch-gaps", "graphs-off", "exposed-comm", "always-launch"} <= fired
    assert "boom" not in fired


RAISING_TEST_PACK = """
from diagnoser.engine import AS, MATCH, TEST, P, Budget, Finding, RuleSet, RuleSpec, ev, rule

BAD_TEST = RuleSpec(id="bad-test", title="A rule whose condition raises", explanation="x")


BAD_PREDICATE = RuleSpec(id="bad-predicate", title="A rule whose field predicate raises", explanation="x")


class BrokenCondition(RuleSet):
    @rule(BAD_TEST, Budget(launch_ms=MATCH.launch), TEST(lambda launch: launch / 0 > 1))
    def bad_test(self, launch):
        return Finding(evidence=[ev("budget.launch_ms", launch)])

    @rule(BAD_PREDICATE, AS.b << Budget(launch_ms=P(lambda v: v.upper() == "X")))
    def bad_predicate(self, b):
        return Finding(evidence=[ev("budget.launch_ms", b["launch_ms"])])
"""


def test_a_raising_test_condition_fails_closed_and_is_reported(tmp_path):
    # experta evaluates TESTs while matching, outside any rule body: unguarded, this one
    # aborted the whole diagnosis with an internal error
    pack = write(tmp_path, "broken_test.py", RAISING_TEST_PACK)
    d = diagnose(Case.model_validate(LAUNCH_CASE), load_rulebook([pack]))
    assert [(e.rule, e.error) for e in d.rule_errors] == [
        ("bad-predicate", "AttributeError in a field predicate: 'float' object has no attribute 'upper'"),
        ("bad-test", "ZeroDivisionError in a TEST: float division by zero"),
    ]
    fired = {h.rule for h in d.hypotheses}
    assert {"launch-gaps", "graphs-off"} <= fired and not {"bad-test", "bad-predicate"} & fired
    (x,) = explain_rules(Case.model_validate(LAUNCH_CASE), load_rulebook([pack]), ["bad-predicate"])
    assert x.outcome == "raised"
    assert x.bodies[0].conditions[0].detail == "launch_ms=1.5 raised AttributeError: 'float' object has no attribute 'upper' in the predicate"


def test_raising_rule_through_the_cli(tmp_path):
    pack = write(tmp_path, "broken.py", RAISING_PACK)
    case = tmp_path / "case.json"
    case.write_text(json.dumps(LAUNCH_CASE))
    out = run_cli("diagnose", str(case), "--rules", str(pack))
    assert out.returncode == 0, out.stderr
    assert "Rule errors" in out.stdout and "boom: ZeroDivisionError" in out.stdout
    assert "[launch-gaps]" in out.stdout


@pytest.mark.parametrize(
    "body,needle",
    [
        (
            '''
            SPEC = RuleSpec(id="typo", title="t", explanation="e")
            class Typo(RuleSet):
                @rule(SPEC, Budget(launch_ms=MATCH.launch), TEST(lambda lanch: lanch > 1))
                def typo(self, launch):
                    return None
            ''',
            "rule typo: TEST argument(s) lanch match no bound variable",
        ),
        (
            '''
            SPEC = RuleSpec(id="thr", title="t", explanation="e")
            class Default(RuleSet):
                @rule(SPEC, Budget(launch_ms=MATCH.launch), TEST(lambda launch, thr=0.9: launch > thr))
                def thr(self, launch):
                    return None
            ''',
            "TEST argument(s) thr match no bound variable",
        ),
        (
            '''
            SPEC = RuleSpec(id="body-arg", title="t", explanation="e")
            class Body(RuleSet):
                @rule(SPEC, Budget(launch_ms=MATCH.launch))
                def body_arg(self, lunch):
                    return None
            ''',
            "body argument(s) lunch match no bound variable",
        ),
        (
            '''
            SPEC = RuleSpec(id="orphan", title="t", parent="no-such-rule", explanation="e")
            class Orphan(RuleSet):
                @rule(SPEC, Budget(launch_ms=MATCH.launch))
                def orphan(self, launch):
                    return None
            ''',
            "parent no-such-rule is not a loaded rule",
        ),
        (
            '''
            SPEC = RuleSpec(id="launch-gaps", title="clash", explanation="e")
            class Clash(RuleSet):
                @rule(SPEC, Budget(launch_ms=MATCH.launch))
                def clash(self, launch):
                    return None
            ''',
            "rule id launch-gaps already defined",
        ),
        (
            '''
            SPEC = RuleSpec(id="needs", title="t", requires=("gpu_vibes",), explanation="e")
            class Needs(RuleSet):
                @rule(SPEC, Budget(launch_ms=MATCH.launch))
                def needs(self, launch):
                    return None
            ''',
            "unknown input(s) gpu_vibes",
        ),
        (
            '''
            SPEC = RuleSpec(id="helper-clash", title="t", explanation="e")
            class HelperClash(RuleSet):
                @rule(SPEC, Budget(launch_ms=MATCH.launch))
                def helper_clash(self, launch):
                    return self.idle_device(launch, None)

                def idle_device(self, busy, one_stream):  # the bundled launch rules' helper has this name
                    return None
            ''',
            "method idle_device of HelperClash already defined in",
        ),
        (
            '''
            SPEC = RuleSpec(id="engine-clash", title="t", explanation="e")
            class EngineClash(RuleSet):
                @rule(SPEC, Budget(launch_ms=MATCH.launch))
                def engine_clash(self, launch):
                    return None

                def declare(self, *facts):
                    return None
            ''',
            "method declare of EngineClash would replace the engine's own",
        ),
        ("def broken(:\n", "cannot load rules: SyntaxError"),
    ],
)
def test_bad_rule_files_are_rejected_at_load(tmp_path, body, needle):
    path = write(tmp_path, "bad_rules.py", HEADER + textwrap.dedent(body))
    with pytest.raises(InputError) as err:
        load_rulebook([path])
    assert str(err.value).startswith(str(path)) and needle in str(err.value)


def test_bad_rule_file_via_cli_is_one_line(tmp_path):
    path = write(tmp_path, "bad_rules.py", HEADER + "X = RuleSpec(id='Bad Id', title='t', explanation='e')\n")
    out = run_cli("rules", "list", "--rules", str(path))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_rules_from_an_entry_point_plugin(tmp_path):
    """A real installed-style plug-in: a dist-info folder whose entry_points.txt names a rule module."""
    plugin = tmp_path / "site"
    plugin.mkdir()
    write(plugin, "my_rules.py", HEADER + textwrap.dedent('''
        SPEC = RuleSpec(id="plugin-lesson", title="From a plug-in", kind=Kind.lesson, explanation="e")
        class PluginRules(RuleSet):
            @rule(SPEC, Budget(step_ms=MATCH.step))
            def plugin_lesson(self, step):
                return Finding(evidence=[ev("budget.step_ms", step)])
        '''))
    dist = plugin / "my_rules-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-rules\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[diagnoser.rules]\nmine = my_rules\n")
    case = tmp_path / "case.json"
    case.write_text(json.dumps(LAUNCH_CASE))
    out = run_cli("diagnose", str(case), "--json", env={"PYTHONPATH": str(plugin)})
    assert out.returncode == 0, out.stderr
    fired = {h["rule"] for h in json.loads(out.stdout)["hypotheses"]}
    assert "plugin-lesson" in fired and "launch-gaps" in fired
    listed = run_cli("rules", "show", "plugin-lesson", env={"PYTHONPATH": str(plugin)})
    assert "entry point mine" in listed.stdout


def test_children_refine_only_when_the_parent_holds():
    book = load_rulebook()
    quiet = {"observations": {"budget": {"step_ms": 9, "device_ms": 8.4, "launch_ms": 0.3, "host_ms": 0.3}, "server": {"cuda_graphs": False}}}
    assert not {h.rule for h in diagnose(Case.model_validate(quiet), book).hypotheses} & {"launch-gaps", "graphs-off"}
    d = diagnose(Case.model_validate(LAUNCH_CASE), book)
    graphs_off = next(h for h in d.hypotheses if h.rule == "graphs-off")
    launch = next(h for h in d.hypotheses if h.rule == "launch-gaps")
    assert graphs_off.parent == "launch-gaps"
    assert graphs_off.gain.removable_ms == pytest.approx(1.5) and launch.gain.speedup == pytest.approx(9 / 7.5)


def test_child_gain_is_capped_by_the_parent():
    # late rank waits 2.5 ms but only 1.2 ms of communication is exposed on the critical path.
    case = Case.model_validate(
        {
            "observations": {
                "budget": {"step_ms": 10, "device_ms": 8.5, "exposed_comm_ms": 1.2, "launch_ms": 0.2, "host_ms": 0.1},
                "collectives": [{"op": "all_to_all", "interval_ms": 3.0, "wait_ms": 2.5, "transfer_ms": 0.5, "late_rank": 5}],
            }
        }
    )
    late = next(h for h in diagnose(case, load_rulebook()).hypotheses if h.rule == "late-rank")
    assert late.gain.removable_ms == pytest.approx(1.2) and late.gain.capped_by == "exposed-comm"
    assert late.id == "late-rank:all_to_all"


def test_missing_inputs_become_questions_not_silence():
    d = diagnose(Case.model_validate({"observations": {"boundaries": {"device_step_ms": 10}}}), load_rulebook())
    questions = {q.input: q for q in d.questions}
    assert "budget" in questions and "launch-gaps" in questions["budget"].would_evaluate
    assert "diagnoser analyze" in questions["budget"].how
    assert not d.of_kind(Kind.cause)
    # a refinement whose parent was evaluated and did not conclude is not asked for
    budget = {"budget": {"step_ms": 10, "device_ms": 10}}
    d = diagnose(Case.model_validate({"observations": budget}), load_rulebook())
    assert all("graph-capture-too-small" not in q.would_evaluate for q in d.questions)


def test_output_order_is_the_same_under_different_hash_seeds():
    case = REPO / "rules" / "fixtures" / "beyond.yaml"
    script = (
        "import sys, yaml; from diagnoser.engine import diagnose, load_rulebook; from diagnoser.models.case import Case\n"
        f"fx = yaml.safe_load(open({str(case)!r}))['fixtures']\n"
        "book = load_rulebook()\n"
        "for f in fx: print([h.id for h in diagnose(Case.model_validate(f['case']), book).hypotheses])\n"
    )
    outputs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] and outputs[0].count("\n") >= 10


def test_a_cause_without_evidence_is_listed_as_a_check(tmp_path):
    pack = write(tmp_path, "empty.py", HEADER + '''
HUNCH = RuleSpec(id="hunch", title="A hunch", explanation="no evidence given")
CHILD = RuleSpec(id="hunch-detail", title="Refines the hunch", parent="hunch", explanation="e")

class Hunches(RuleSet):
    @rule(HUNCH, Budget(step_ms=MATCH.step))
    def hunch(self, step):
        return Finding(evidence=[], removable_ms=step / 2)

    @rule(CHILD, Budget(step_ms=MATCH.step))
    def hunch_detail(self, step):
        return Finding(evidence=[ev("budget.step_ms", step)], removable_ms=1.0)
''')
    d = diagnose(Case.model_validate(LAUNCH_CASE), load_rulebook([pack]))
    hunch = next(h for h in d.hypotheses if h.rule == "hunch")
    assert hunch.kind is Kind.check
    assert "hunch-detail" not in {h.rule for h in d.hypotheses}  # a check does not let refinements fire


SPEC_PACK = """
from diagnoser.engine import MATCH, Budget, Finding, RuleSet, ev, load_specs, rule

SPECS = load_specs(__file__)

class Packed(RuleSet):
    @rule(SPECS["queue-behind"], Budget(queue_ms=MATCH.queue))
    def queue_behind(self, queue):
        return Finding(evidence=[ev("budget.queue_ms", queue, "ms")], removable_ms=queue)
"""


def test_rule_pack_with_specs_in_yaml(tmp_path):
    write(tmp_path, "pack.py", SPEC_PACK)
    write(tmp_path, "pack.yaml", """
queue-behind:
  title: Launched work queues behind other work
  requires: [budget]
  explanation: kernels wait on the stream
  check: {measure: stream timeline, confirms: waits behind other streams, refutes: no queueing}
  undo: [{metric: p99_itl, revert_if: p99 rises}]
""")
    case = {"observations": {"budget": {"step_ms": 10, "device_ms": 8, "queue_ms": 2}}}
    d = diagnose(Case.model_validate(case), load_rulebook([tmp_path]))
    hit = next(h for h in d.hypotheses if h.rule == "queue-behind")
    assert hit.gain.speedup == pytest.approx(10 / 8) and hit.undo[0].metric.value == "p99_itl"


@pytest.mark.parametrize(
    "yaml_text,needle",
    [
        ("queue-behind:\n  title: t\n  explanation: e\n  undo: [{metric: vibes, revert_if: x}]\n", "queue-behind: undo.0.metric"),
        ("queue-behind:\n  title: t\n  explanation: e\n  colour: red\n", "colour: Extra inputs are not permitted"),
        ("queue-behind: [1, 2]\n", "expected a mapping of spec fields"),
        ("other-rule:\n  title: t\n  explanation: e\n", "cannot load rules: KeyError: 'queue-behind'"),
    ],
)
def test_bad_spec_yaml_is_one_line_at_load(tmp_path, yaml_text, needle):
    pack = write(tmp_path, "pack.py", SPEC_PACK)
    write(tmp_path, "pack.yaml", yaml_text)
    with pytest.raises(InputError) as err:
        load_rulebook([pack])
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_not_of_several_patterns_is_refused():
    """experta wires only a NOT's first element and drops the rest silently: NOT(A, TEST(...)) would read as NOT(A)."""
    from diagnoser.engine import NOT, TEST, Metrics, Probe

    with pytest.raises(TypeError, match="NOT takes one fact pattern, got 2"):
        NOT(Metrics(), TEST(lambda: True))
    with pytest.raises(TypeError, match="NOT takes one fact pattern"):
        NOT(TEST(lambda: True))
    assert NOT(Probe(throttled=[]))[0] == Probe(throttled=[])
