"""Every packaged walkthrough passes the linter, its figures are the calculators', and a bad file is one line, exit 2."""

import copy
import filecmp

import pytest
import yaml

from conftest import REPO
from diagnoser.bound import compute_bound, floor_from_bytes
from diagnoser.bound.batching import batch_estimate
from diagnoser.cli import main
from diagnoser.engine import diagnose
from diagnoser.models.case import load_case
from diagnoser.models.workload import Workload
from diagnoser.walkthroughs import load_catalogue
from diagnoser.walkthroughs.lint import lint
from diagnoser.walkthroughs.sources import BUNDLED
from diagnoser.whatif import amdahl, speculation

FP8 = {"weights": "fp8", "expert_weights": "fp8", "kv_cache": "bf16", "lm_head": "bf16"}
MOE = {"model": "qwen3-30b-a3b", "hardware": "h100-sxm", "precision": FP8, "context": 4096}


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue()


def test_every_packaged_walkthrough_passes_the_linter(catalogue):
    checked = lint([BUNDLED], next(iter(catalogue.values())).book)
    assert sorted(p.doc.name for p in checked) == sorted(catalogue)
    assert len([n for n in catalogue if n.startswith("case-")]) >= 5


def test_the_reference_walkthroughs_figures_are_recomputed_by_the_calculators(catalogue):
    prepared = catalogue["decode-gap"]
    got = {step: f.value for step, f in prepared.figures.items()}
    trap = {step: [t.figure.value for t in traps] for step, traps in prepared.traps.items()}
    synthetic = floor_from_bytes(10e9, 2000, observed_step_ms=20)
    assert got["floor-ms"] == synthetic.floor_ms == 5
    assert got["ceiling"] == synthetic.ceiling_tokens_per_s == 200
    assert got["observed-rate"] == synthetic.observed_tokens_per_s == 50
    assert got["fraction"] == pytest.approx(100 * synthetic.fraction_of_ceiling) == 25
    assert got["unexplained-ms"] == synthetic.unexplained_ms == 15
    group = compute_bound(Workload.model_validate({**MOE, "batch": 32, "layout": {"tp": 2, "ep": 2}}))
    assert got["moe-union"] == group.expert_union.touched_per_layer_busiest_rank
    assert got["moe-floor"] == group.step_floor_ms and trap["moe-floor"] == [group.naive.floor_ms]
    assert trap["moe-floor"][0] < got["moe-floor"] / 5  # active parameters undercount this step several times over
    parts = {"device": 4.5, "comm": 2, "launch": 1.5, "other": 1}
    assert got["graph-gain"] == amdahl(parts, "launch", 0.5).speedup == 1.125
    assert trap["graph-gain"] == [9 / 4.5, amdahl(parts, "launch", 0).speedup]
    assert got["ranks-step"] == 9 and trap["ranks-step"] == [18]
    win, low = speculation(0.8, 7, 12, 3, 1, 9), speculation(0.2, 7, 12, 3, 1, 9)
    assert got["spec-tokens"] == win.expected_tokens_per_cycle and round(got["spec-tokens"], 3) == 4.161
    assert got["spec-tokens-a1"] == speculation(1, 7, 12, 3, 1, 9).expected_tokens_per_cycle == 8
    assert got["spec-speedup"] == win.speedup and round(got["spec-speedup"], 2) == 2.34
    assert trap["spec-speedup"] == [win.expected_tokens_per_cycle, speculation(0.8, 7, 12, 0, 0, 9).speedup]
    assert got["spec-low"] == low.speedup and round(got["spec-low"], 2) == 0.70
    single = Workload.model_validate({**MOE, "batch": 1, "layout": {"tp": 1}, "observed": {"step_ms": 8}})
    at_32 = next(p for p in batch_estimate(single, [32], "w").points if p.batch == 32)
    assert got["batch-rate"] == at_32.aggregate_tokens_per_s and trap["batch-rate"] == [32 / 8 * 1e3]


def test_case_walkthroughs_ship_the_corpus_cases_and_agree_with_the_engine_and_the_answers(catalogue):
    answers = yaml.safe_load((REPO / "tests" / "data" / "cases" / "answers.yaml").read_text())
    cases = [p for p in catalogue.values() if p.doc.case]
    assert len(cases) >= 5
    for prepared in cases:
        shipped = prepared.folder / prepared.doc.case
        assert filecmp.cmp(shipped, REPO / "tests" / "data" / "cases" / shipped.name, shallow=False), shipped.name
        cause = next(s for s in prepared.doc.steps if s.id == "cause")
        ranked = [h.rule for h in diagnose(load_case(shipped), prepared.book).hypotheses if h.kind.value == "cause"]
        assert ranked[0] == cause.answer, (prepared.doc.name, ranked)
        assert cause.answer in answers["accepted"][answers["cases"][shipped.stem]]
        assert all(c.rule for c in cause.choices)  # the trainee picks among the rule base's causes


VALID = {
    "name": "tiny",
    "title": "A tiny walkthrough",
    "scenario": "One rank, one step.",
    "skills": {"floor": "the memory floor"},
    "steps": [
        {
            "id": "floor-ms", "kind": "number", "skill": "floor", "ask": "The floor?", "explain": "Bytes over bandwidth.",
            "compute": {"calculator": "floor", "inputs": {"bytes_per_step": 1.0e10, "bandwidth_gbs": 2000}, "field": "floor_ms"},
            "unit": "ms", "tolerance": {"relative": 0.02},
            "traps": [{"name": "half the bandwidth", "why": "w",
                       "compute": {"calculator": "floor", "inputs": {"bytes_per_step": 1.0e10, "bandwidth_gbs": 1000}, "field": "floor_ms"}}],
        },
        {
            "id": "pick", "kind": "choice", "skill": "floor", "ask": "Normal?", "explain": "No fraction is normal.", "answer": "no",
            "choices": [
                {"id": "no", "text": "no universal fraction", "why": "w"},
                {"id": "yes", "text": "a tenth is typical", "why": "w", "rule": "low-fraction-not-a-diagnosis",
                 "engine": {"case": {"observations": {"claims": ["fraction_is_normal"]}}, "fires": ["low-fraction-not-a-diagnosis"]}},
            ],
        },
    ],
}


def mutated(path: str, value):
    doc = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is KeyError:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return doc


def lint_cli(tmp_path, capsys, doc):
    path = tmp_path / "w.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    rc = main(["walkthrough", "lint", str(path)])
    return rc, capsys.readouterr()


def test_a_sound_walkthrough_lints_clean(tmp_path, capsys):
    rc, out = lint_cli(tmp_path, capsys, VALID)
    assert rc == 0 and out.out.startswith("ok   ") and "tiny (2 steps)" in out.out


@pytest.mark.parametrize("path,value,message", [
    ("steps.0.compute.calculator", "flor", "unknown calculator 'flor' (known: "),
    ("steps.0.compute.inputs.bandwith_gbs", 2000, "calculator floor: input bandwith_gbs: Unexpected keyword argument"),
    ("steps.0.compute.inputs.bytes_per_step", "lots", "calculator floor: input bytes_per_step:"),
    ("steps.0.compute.field", "floor_mss", "field 'floor_mss': no 'floor_mss' in the result"),
    ("steps.0.compute.inputs.bandwidth_gbs", -1, "calculator floor: bytes per step and bandwidth must be positive"),
    ("steps.0.tolerance", KeyError, "steps.0.number.tolerance: Field required"),
    ("steps.0.tolerance", {"relative": 0.02, "absolute": 1}, "give exactly one of relative or absolute"),
    ("steps.0.traps.0.compute.inputs.bandwidth_gbs", 2010, "within the tolerance of the answer"),
    ("steps.1.answer", "maybe", "answer maybe is not among the choices"),
    ("steps.1.skill", "speed", "skill 'speed' is not declared in skills"),
    ("skills.unused", "a skill nothing scores", "skill 'unused' is declared but no step scores it"),
    ("steps.1.choices.1.rule", "low-fraction-not-diagnosis", "is not a loaded rule (nearest: low-fraction-not-a-diagnosis)"),
    ("steps.1.choices.1.engine.fires", ["summed-bandwidth"], "step pick: rule summed-bandwidth does not conclude on the engine case"),
    ("steps.1.choices.1.engine.case", {"observations": {"claimed_step_ms": "$trap"}}, "$trap is used where there is no such figure"),
    ("steps.1.choices.1.engine.case", {"observations": {"budget": {"step_ms": -1}}}, "engine case: observations.budget.step_ms"),
    ("steps.1.id", "floor-ms", "step id floor-ms is used twice"),
    ("name", "lint", "is a command word"),
])
def test_a_broken_walkthrough_is_one_line_and_exit_2(tmp_path, capsys, path, value, message):
    rc, out = lint_cli(tmp_path, capsys, mutated(path, value))
    assert rc == 2, out
    assert out.err.count("\n") == 1 and message in out.err, out.err


def test_unreadable_files_and_missing_paths_are_one_line(tmp_path, capsys):
    rc, out = lint_cli(tmp_path, capsys, "name: [unclosed\n")
    assert rc == 2 and "not valid" in out.err and out.err.count("\n") == 1
    assert main(["walkthrough", "lint", str(tmp_path / "none")]) == 2
    assert "no such walkthrough file or folder" in capsys.readouterr().err
    assert main(["walkthrough", "lint"]) == 2
