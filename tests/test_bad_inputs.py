"""The generated bad-input corpus (tests/bad_inputs.py), run in this process: every case keeps the contract.

`python tests/bad_inputs.py` runs the same corpus one interpreter per case, with a time limit
each, and prints the figure; here the cases share an interpreter so the suite stays fast.
"""

import pytest

import bad_inputs


@pytest.fixture(scope="module")
def corpus():
    return bad_inputs.corpus(bad_inputs.probe_report())


def test_the_corpus_is_large_and_covers_every_input_kind(corpus):
    assert len(corpus) >= 250
    kinds = {case.argv[0] for case in corpus}
    assert {"diagnose", "bound", "whatif", "analyze", "probe", "rules"} <= kinds


def test_every_bad_input_ends_in_exit_0_or_one_line_exit_2_with_inputs_unchanged(corpus):
    failures = [f"{o.case.name}: {o.why}" for o in map(bad_inputs.run_in_process, corpus) if not o.ok]
    assert not failures, "\n".join(failures)
