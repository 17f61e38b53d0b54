"""`diagnoser walkthrough`: list, scripted and interactive runs, --json, the interviewer's sheet, packs, bad input."""

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from conftest import REPO
from diagnoser.cli import cli, main

ANSWERS = REPO / "tests" / "data" / "walkthrough_answers"
SKILLS = ["method", "floor", "moe-traffic", "step-budget", "graphs", "speculation", "batching", "follow-ups"]


def test_without_a_name_it_lists_the_walkthroughs(capsys):
    assert main(["walkthrough"]) == 0
    out = capsys.readouterr().out
    assert "decode-gap" in out and "case-d13-expert-padding" in out
    assert main(["walkthrough", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert listed["decode-gap"]["steps"] == 24 and listed["decode-gap"]["skills"] == SKILLS


def test_a_scripted_run_prints_its_score_with_a_breakdown_by_skill_and_exits_0_at_any_score(capsys):
    assert main(["walkthrough", "decode-gap", "--answers", str(ANSWERS / "decode-gap-mistakes.yaml")]) == 0
    out = capsys.readouterr().out
    assert "[trap: active-parameter bytes as traffic] 0.4985 ms; expected 5.934 ms (+/- 3 %)" in out
    score = out[out.index("score: "):]
    assert score.startswith("score: 0 / 24 (0 %)")
    for skill in SKILLS:
        assert f"\n  {skill} " in score
    assert "traps fallen into: first-check (misconfigured)" in score


def test_json_gives_the_same_run_as_one_document(capsys):
    assert main(["walkthrough", "decode-gap", "--answers", str(ANSWERS / "decode-gap-reference.yaml"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1 and doc["walkthrough"] == "decode-gap" and doc["complete"]
    assert (doc["earned"], doc["possible"], doc["percent"]) == (24, 24, 100)
    assert [s["skill"] for s in doc["skills"]] == SKILLS
    assert sum(s["earned"] for s in doc["skills"]) == doc["earned"]
    spec = next(s for s in doc["steps"] if s["step"] == "spec-speedup")
    assert spec["outcome"] == "correct" and spec["read_as"] == "2.34x"
    assert "speed-up: 4.161 x 9 / 16 = 2.34x" in spec["worked"]


def test_an_interactive_run_asks_again_on_an_unreadable_answer_and_stops_at_end_of_input():
    out = CliRunner().invoke(cli, ["walkthrough", "case-d08-prefill-stalls"], input="soon\n725 ms\na\n")
    assert out.exit_code == 0, out.output
    assert "cannot read that: expected a number in ms" in out.output
    assert "[correct] 725 ms" in out.output and "[correct] a) the running streams'" in out.output
    assert "score: 2 / 3 (67 %) - stopped before the end" in out.output
    assert "what was found:" in out.output


def test_interactive_json_keeps_stdout_for_the_document():
    out = CliRunner().invoke(cli, ["walkthrough", "case-d08-prefill-stalls", "--json"], input="725\n\nprefill-stalls\n")
    assert out.exit_code == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [s["outcome"] for s in doc["steps"]] == ["correct", "skipped", "correct"]
    assert "answer> " in out.stderr


def test_the_interviewer_sheet_has_answers_reasoning_wrong_answers_and_follow_ups(capsys):
    assert main(["walkthrough", "--interviewer", "decode-gap"]) == 0
    out = capsys.readouterr().out
    assert "scenario (read it out):" in out and "expected: 2.341x (+/- 1 %)" in out
    assert "wrong: 4.161x (a speculation gain without draft and verify cost):" in out
    assert "With the measured costs the speed-up is 2.34x, not 4.16x." in out
    assert "ask next:" in out
    assert main(["walkthrough", "--interviewer", "case-e16-layer-split", "--json"]) == 0
    sheet = json.loads(capsys.readouterr().out)
    cause = next(s for s in sheet["steps"] if s["id"] == "cause")
    assert cause["expected"] == "a) Pipeline stages run one after another" and len(cause["wrong_answers"]) == 4
    assert "1.67x" in sheet["debrief"]


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    answers = tmp_path / "answers.yaml"
    cases = [
        (["walkthrough", "decode-gaps"], "no walkthrough named 'decode-gaps' (nearest: decode-gap)"),
        (["walkthrough", "decode-gap", "case-d08-prefill-stalls"], "one NAME at a time"),
        (["walkthrough", "--interviewer"], "name the walkthrough"),
        (["walkthrough", "decode-gap", "--answers", str(answers)], "no step 'floor' in this walkthrough"),
        (["walkthrough", "decode-gap", "--answers", str(tmp_path / "none.yaml")], "no such file"),
        (["walkthrough", "lint", "x.yaml", "--json"], "walkthrough lint takes only paths"),
    ]
    answers.write_text("floor: 5 ms\n")
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (argv, err)


def test_the_walkthrough_schema_is_printed(capsys):
    assert main(["schema", "walkthrough"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "Walkthrough" and {"NumberStep", "ChoiceStep", "OrderStep", "Trap"} <= set(schema["$defs"])
    undocumented = [(name, field) for name, part in [("Walkthrough", schema), *schema["$defs"].items()]
                    for field, spec in part.get("properties", {}).items() if "description" not in spec]
    assert undocumented == []  # the schema is what authors read: every field says what it is


def test_an_installed_pack_adds_its_walkthroughs(tmp_path):
    """A pack is an entry point in the diagnoser.walkthroughs group naming a module with a WALKTHROUGHS folder."""
    package = tmp_path / "wtpack"
    (package / "walkthroughs").mkdir(parents=True)
    (package / "__init__.py").write_text("from pathlib import Path\nWALKTHROUGHS = Path(__file__).parent / 'walkthroughs'\n")
    source = (REPO / "diagnoser" / "walkthroughs" / "scenarios" / "case-d08-prefill-stalls.yaml").read_text()
    (package / "walkthroughs" / "prefill.yaml").write_text(source.replace("name: case-d08-prefill-stalls", "name: pack-prefill"))
    (package / "walkthroughs" / "cases").mkdir()  # cases sit in a subfolder: the folder's own YAML files are walkthroughs
    (package / "walkthroughs" / "cases" / "D08.yaml").write_text((REPO / "tests" / "data" / "cases" / "D08.yaml").read_text())
    meta = tmp_path / "wtpack-0.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: wtpack\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text("[diagnoser.walkthroughs]\nsample = wtpack\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    listed = subprocess.run([sys.executable, "-m", "diagnoser", "walkthrough"], capture_output=True, text=True, env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "pack-prefill" in listed.stdout and "case-d08-prefill-stalls" in listed.stdout


def test_a_walkthrough_of_ones_own_is_added_with_walkthroughs_and_may_not_take_a_bundled_name(tmp_path, capsys):
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "name: mine\ntitle: Mine\nscenario: One rank.\nskills: {floor: the floor}\nsteps:\n"
        "  - {id: floor-ms, kind: number, skill: floor, ask: Floor?, explain: Bytes over bandwidth., unit: ms,\n"
        "     tolerance: {absolute: 0.1}, compute: {calculator: floor, inputs: {bytes_per_step: 4.0e+9, bandwidth_gbs: 2000}, field: floor_ms}}\n"
    )
    answers = tmp_path / "a.yaml"
    answers.write_text("floor-ms: 2\n")
    assert main(["walkthrough", "mine", "--walkthroughs", str(mine), "--answers", str(answers)]) == 0
    assert "score: 1 / 1 (100 %)" in capsys.readouterr().out
    mine.write_text(mine.read_text().replace("name: mine", "name: decode-gap"))
    assert main(["walkthrough", "--walkthroughs", str(mine)]) == 2
    assert "walkthrough decode-gap is already defined in" in capsys.readouterr().err
