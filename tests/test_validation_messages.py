"""A bad case gets one line that says the whole problem: every form a union value failed, the
field a misspelt key was meant to be, or that a required field's key looks misspelt."""

from __future__ import annotations

import pytest
from conftest import run_cli
from pydantic import ValidationError

from diagnoser.models.case import Case
from diagnoser.models.documents import validation_message


def message(doc: dict) -> str:
    with pytest.raises(ValidationError) as err:
        Case.model_validate(doc)
    return validation_message(err.value, "c.yaml", Case)


def test_a_union_value_names_every_form_it_failed():
    assert message({"workload": {"model": 5}}) == "c.yaml: workload.model: Input should be a valid string, or a valid dictionary"


def test_a_misspelt_key_gets_the_nearest_field():
    assert message({"observations": {"boundaries": {"client_p99": 3}}}) == (
        "c.yaml: observations.boundaries.client_p99: not a field here; did you mean 'client_p99_ms'?"
    )
    assert message({"obsrvations": {}}) == "c.yaml: obsrvations: not a field here; did you mean 'observations'?"


def test_a_key_like_no_field_lists_the_fields_there():
    text = message({"workload": {"concurency": 4}})
    assert text.startswith("c.yaml: workload.concurency: not a field here (fields: batch, context, ")


def test_a_missing_field_beside_its_misspelling_is_one_problem():
    assert message({"observations": {"collectives": [{"opp": "all_reduce"}]}}) == (
        "c.yaml: observations.collectives.0.op: Field required (is 'opp', given beside it, a misspelling?)"
    )


def test_a_whole_document_check_has_no_place_to_name():
    from pydantic import BaseModel, model_validator

    class Doc(BaseModel):
        a: int = 0

        @model_validator(mode="after")
        def whole(self):
            raise ValueError("the parts disagree")

    with pytest.raises(ValidationError) as err:
        Doc.model_validate({"a": 1})
    assert validation_message(err.value, "d.yaml", Doc) == "d.yaml: (top level): the parts disagree"


def test_several_fields_failing_alike_are_not_one_union():
    """Five fields holding one NaN object fail the same way: the first is named, the others counted."""
    from probe_examples import bandwidth_facts

    from diagnoser.models.probe_results import BandwidthFacts

    with pytest.raises(ValidationError) as err:
        bandwidth_facts(gbs=float("nan"))
    assert validation_message(err.value, "probe", BandwidthFacts) == "probe: read_gbs: Input should be a finite number (+4 more)"


def test_other_problems_are_still_counted():
    assert message({"observations": {"expected": {"x": 1}}}).endswith("kind: Field required (+1 more)")


def test_the_cli_says_it_in_one_line_with_exit_2(tmp_path):
    case = tmp_path / "c.yaml"
    case.write_text("observations:\n  boundaries:\n    devce_step_ms: 12\n")
    done = run_cli("diagnose", str(case))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"diagnoser: error: {case}: observations.boundaries.devce_step_ms: not a field here; did you mean 'device_step_ms'?"
    ]
