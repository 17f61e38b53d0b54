"""The bundled rule base against its fixtures, and fixture coverage of every rule."""

import pytest
import yaml

from conftest import REPO, run_cli
from diagnoser.engine import load_rulebook
from diagnoser.engine.fixtures import bundled_fixtures, check_fixture, load_fixtures
from diagnoser.models.hypothesis import Kind

FIXTURE_DIR = REPO / "rules" / "fixtures"
ALL = [(path.name, fx) for path in sorted(FIXTURE_DIR.glob("*.yaml")) for fx in load_fixtures(path)]

TABLE_ROWS = ["small-expert-kernels", "launch-gaps", "exposed-comm", "client-gap", "long-context-slowdown"]
GUARDS = [
    "active-params-as-traffic",
    "expert-tensors-uncoalesced",
    "overlap-summed",
    "kernel-sum-as-elapsed",
    "speculation-without-cost",
    "boundary-mismatch",
]
LESSONS = [
    "low-fraction-not-a-diagnosis", "smaller-tp-same-calls", "graphs-remove-launch-share-only", "sparsity-is-not-ep",
    "sampling-not-necessarily-cpu", "diagnostics-not-capacity", "fix-demonstrated-first",
]
BEYOND = [
    "graphs-off", "graph-capture-too-small", "host-overhead", "output-length-growth", "penalty-over-history",
    "proxy-buffering", "sort-sampling", "moe-untuned-config", "custom-allreduce-off", "pcie-topology",
    "clock-throttle", "cpu-offload", "prefill-stalls", "speculation-slowdown", "slow-kernel-path",
]


@pytest.fixture(scope="module")
def book():
    return load_rulebook()


@pytest.mark.parametrize("fixture", [fx for _, fx in ALL], ids=[f"{f}:{fx.name}" for f, fx in ALL])
def test_fixture(fixture, book):
    assert check_fixture(fixture, book) == []


def test_every_rule_fires_in_some_fixture(book):
    fired = {r for _, fx in ALL for r in fx.fires} | {fx.first for _, fx in ALL if fx.first}
    assert set(book.specs) - fired == set()


@pytest.mark.parametrize("rule_id", TABLE_ROWS)
def test_table_row_ranks_first_and_has_a_near_miss(rule_id):
    assert any(fx.first == rule_id for _, fx in ALL)
    assert any(rule_id in fx.silent and not fx.first for _, fx in ALL)


@pytest.mark.parametrize("rule_id", GUARDS + LESSONS + BEYOND)
def test_named_rules_exist_with_the_right_kind(book, rule_id):
    expected = Kind.guard if rule_id in GUARDS else Kind.lesson if rule_id in LESSONS else Kind.cause
    assert book.specs[rule_id].kind is expected


def test_every_cause_states_check_remedies_and_undo(book):
    for spec in book.specs.values():
        assert spec.check is not None, spec.id
        if spec.kind is Kind.cause:
            assert spec.remedies and spec.undo, spec.id


def test_near_miss_detection_is_real(book):
    """A fixture that expects the wrong thing must fail: the harness can say no."""
    fx = next(fx for _, fx in ALL if fx.name.startswith("gaps before ready kernels"))
    wrong = fx.model_copy(update={"first": "client-gap", "silent": ["graphs-off"]})
    problems = check_fixture(wrong, book)
    assert "expected client-gap first, got graphs-off" in problems and "graphs-off fired but must not" in problems


def test_a_speculation_estimate_is_worked_again_against_the_fixed_step(book):
    """The reference's two worked examples together: the 9 ms step loses its 1.5 ms launch part,
    so the 0.8-acceptance cycle (4.161 tokens per 16 ms) gives 4.161 x 7.5 / 16 = 1.951x, not 2.341x."""
    from diagnoser.engine import diagnose

    fx = next(fx for _, fx in ALL if fx.name.startswith("a launch cost and a speculation estimate"))
    (lesson,) = [h for h in diagnose(fx.case, book).hypotheses if h.id == "fix-demonstrated-first"]
    assert "from 9 to at most 7.5 ms" in lesson.explanation
    assert "4.161 x 7.5 / 16 = 1.951x, not 2.341x" in lesson.explanation


def test_bundled_fixture_folder_is_the_package_data():
    assert bundled_fixtures().resolve() == FIXTURE_DIR.resolve()


def test_rules_cli_list_show_test(tmp_path):
    listed = run_cli("rules", "list")
    assert listed.returncode == 0 and "launch-gaps" in listed.stdout and "graphs-off" in listed.stdout
    shown = run_cli("rules", "show", "graphs-off")
    doc = yaml.safe_load(shown.stdout)
    assert doc["parent"] == "launch-gaps" and doc["undo"] and doc["check"]["refutes"]
    assert run_cli("rules", "show", "nope").returncode == 2
    ok = run_cli("rules", "test")
    assert ok.returncode == 0 and f"{len(ALL)} passed, 0 failed" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"fixtures": [{"name": "wrong", "case": {}, "fires": ["launch-gaps"]}]}))
    failed = run_cli("rules", "test", str(bad))
    assert failed.returncode == 3 and "expected launch-gaps to fire" in failed.stdout


def test_installed_wheel_carries_specs_and_fixtures(tmp_path):
    """Specs (rules/*.yaml) and fixtures are package data: the rule base must run from a wheel."""
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "w"), str(REPO)],
        check=True, capture_output=True, timeout=240,
    )
    (wheel,) = (tmp_path / "w").glob("diagnoser-*.whl")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=240)
    out = run_cli("rules", "test", env={"PYTHONPATH": str(site)}, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(ALL)} passed, 0 failed" in out.stdout


def test_no_rule_module_assigns_a_threshold_twice():
    """Rule TESTs read module constants when they run, so a second assignment silently changes
    every rule above it (guards.py once set SAME_FIGURE to 0.1 and then to 0.05)."""
    import ast

    repeated = []
    for path in sorted((REPO / "rules").glob("*.py")):
        names = [
            target.id
            for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        ]
        repeated += [f"{path.name}: {name}" for name in sorted({n for n in names if names.count(n) > 1})]
    assert repeated == []
