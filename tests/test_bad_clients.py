"""The hostile-client corpus (tests/bad_clients.py) against one lab server: every case let go of,
and what the whole corpus leaves resident in the server bounded."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import bad_clients  # noqa: E402


def test_the_lab_server_lets_go_of_every_hostile_client():
    cases = bad_clients.corpus()
    assert len(cases) >= 100 and len({c.name for c in cases}) == len(cases)
    outcomes, before, after = bad_clients.run_corpus(cases)
    failed = [f"{o.case.name}: {o.why}" for o in outcomes if not o.ok]
    assert not failed, "\n".join(failed)
    assert after - before <= bad_clients.MAX_GROWTH_MB, f"the server kept {after - before:.0f} MB ({before:.0f} -> {after:.0f})"
    assert max(o.peak_mb for o in outcomes) <= bad_clients.MAX_PEAK_MB
