"""The 74 fixtures that existed before evidence grades rank exactly as they did then.

`data/v1_fixture_rankings.json` was recorded by the engine before grades, standalone
refinements and the new rules (commit 4f7084b): every hypothesis id, kind and bounded
speed-up, in order. Two things differ on purpose: cpu-offload's gain came from an assumed
PCIe rate, which no measured figure bounds, so it is now "not bounded yet"; and a measured
refinement that accounts for at least half of its measured parent's time now ranks just ahead
of the parent instead of after it (14 entries reordered, same ids, kinds and speed-ups), since
it names where the parent's time goes (`runner.explains_parent`); and where the server's own settings turn
penalties on, default-penalties follows as an indicated cause (the penalty pass every request pays).
"""

import json

import pytest

from conftest import REPO
from diagnoser.engine import diagnose, load_rulebook
from diagnoser.engine.fixtures import bundled_fixtures, load_fixtures

RECORDED = json.loads((REPO / "tests" / "data" / "v1_fixture_rankings.json").read_text())


@pytest.fixture(scope="module")
def book():
    return load_rulebook()


def _fixture(key: str):
    file, name = key.split(":", 1)
    return next(fx for fx in load_fixtures(bundled_fixtures() / file) if fx.name == name)


def test_every_recorded_fixture_is_still_bundled():
    assert len(RECORDED) == 74
    for key in RECORDED:
        _fixture(key)


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_the_fixture_ranks_as_recorded(key, book):
    d = diagnose(_fixture(key).case, book)
    got = [[h.id, h.kind.value, round(h.gain.speedup, 4) if h.gain else None] for h in d.hypotheses]
    assert got == RECORDED[key]
