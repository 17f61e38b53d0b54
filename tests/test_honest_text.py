"""What a diagnosis says must be what an engineer would sign (hardening issue, Deliver 6).

Each claim has its test: suggested commands parse (test_suggested_commands.py), the bound
line names the limiting floor (test_diagnose.py::test_the_bound_line_says_which_floor_limits_the_step),
no claim below the floor (test_evidence_grades.py), a budget that disagrees with the step is
flagged (rules/fixtures/reported.yaml, budget-step-disagrees), whatif batch checks HBM and
reads tokens_per_s (test_whatif.py). This file holds the rest.
"""

import json

import pytest

from conftest import run_cli
from diagnoser.bound import floor_from_bytes

LOW_LINE = "a low fraction of the ceiling is not a diagnosis"


@pytest.mark.parametrize("observed_ms,low", [(5.5, False), (9.9, False), (10.1, True), (40.0, True)])
def test_the_low_fraction_line_appears_only_when_the_fraction_is_low(observed_ms, low):
    # 10 GB over 2 TB/s is a 5 ms floor: under half of the ceiling means a step over 10 ms
    result = floor_from_bytes(10e9, 2000, observed_step_ms=observed_ms)
    assert result.fraction_of_ceiling == pytest.approx(5 / observed_ms)
    assert any(LOW_LINE in line for line in result.sanity) is low


def test_the_cli_prints_it_the_same_way():
    near = run_cli("bound", "--bytes-per-step", "10GB", "--bandwidth", "2TB/s", "--observed-step-ms", "6", "--json")
    far = run_cli("bound", "--bytes-per-step", "10GB", "--bandwidth", "2TB/s", "--observed-step-ms", "50", "--json")
    assert not any(LOW_LINE in s for s in json.loads(near.stdout)["sanity"])
    assert any(LOW_LINE in s for s in json.loads(far.stdout)["sanity"])
