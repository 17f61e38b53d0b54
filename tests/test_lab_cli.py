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


@pytest.mark.parametrize(("late", "named"), [(1, True), (0, False)])
def test_a_late_rank_finding_names_the_straggler_only_when_it_blames_its_rank(late, named):
    """The straggler slows rank 1: a late-rank finding that points at rank 0 is another imbalance."""
    from diagnoser.engine import diagnose, load_rulebook
    from diagnoser.lab.case import score
    from diagnoser.models.case import Case

    case = Case.model_validate({"observations": {
        "budget": {"step_ms": 10, "device_ms": 6, "exposed_comm_ms": 3.5, "launch_ms": 0.3, "host_ms": 0.2},
        "collectives": [{"op": "all_reduce", "interval_ms": 3.5, "wait_ms": 2.5, "transfer_ms": 1.0, "late_rank": late}],
    }})
    fault = FAULTS["straggler"]
    s = score(diagnose(case, load_rulebook()), fault.cause, fault.names)
    assert (s.rank == 1) is named
    assert (s.rank is None) is not named and s.top == "late-rank"
