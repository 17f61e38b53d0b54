"""``diagnoser lab`` input errors and listings; the exercise's draw and verdict."""

from __future__ import annotations

import pytest

from diagnoser.cli import main
from diagnoser.lab.exercise import draw, verdict
from diagnoser.lab.faults import FAULTS


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["lab", "serve", "--fault", "gremlins"], "unknown fault"),
        (["lab", "serve", "--fault", "eager-launches"], "no cpu form"),
        (["lab", "serve", "--port", "70000"], "--port"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_faults_listing_names_every_fault(capsys):
    assert main(["lab", "faults"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in FAULTS)


def test_every_fault_names_a_real_rule():
    from diagnoser.engine import load_rulebook

    causes = {f.cause for f in FAULTS.values() if f.cause}
    assert causes <= set(load_rulebook().specs)


def test_exercise_draws_the_forms_the_device_has_and_scores():
    drawn = {draw("cpu", seed).name for seed in range(200)}
    assert drawn == {name for name, f in FAULTS.items() if "cpu" in f.devices}
    assert {"small-experts", "eager-launches"} <= {draw("cuda", seed).name for seed in range(200)} - drawn
    fault = FAULTS["kv-gather"]
    assert verdict(fault, "long-context-slowdown")[0] and not verdict(fault, "none")[0]
    assert verdict(FAULTS["none"], "")[0]
