"""The generated bad-input corpus (tests/bad_inputs.py), run in this process: every case keeps the contract.

`python tests/bad_inputs.py` runs the same corpus one interpreter per case, with a time limit
each, and prints the figures; here the cases share an interpreter so the suite stays fast. Cases
against hostile servers wait out their own time limits by design, so a fixed sample of them
runs here and the script runs them all.
"""

import pytest

import bad_inputs
from bad_inputs_more import SLOW

SLOW_SAMPLE = 12


@pytest.fixture(scope="module")
def corpus():
    return bad_inputs.corpus(bad_inputs.probe_report())


def test_the_corpus_is_large_and_covers_every_input_kind(corpus):
    assert len(corpus) >= 1000
    kinds = {case.argv[0] for case in corpus}
    assert {"diagnose", "bound", "whatif", "analyze", "probe", "rules", "walkthrough", "live", "case"} <= kinds
    assert sum(case.server is not None for case in corpus) >= 100


def test_every_bad_input_ends_in_exit_0_or_one_line_exit_2_with_inputs_unchanged(corpus):
    slow = [case for case in corpus if case.name.startswith(SLOW)]
    chosen = [case for case in corpus if not case.name.startswith(SLOW)] + slow[:: max(1, len(slow) // SLOW_SAMPLE)]
    failures = [f"{o.case.name}: {o.why}" for o in map(bad_inputs.run_in_process, chosen) if not o.ok]
    assert not failures, "\n".join(failures)
