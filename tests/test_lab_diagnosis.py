"""The lab diagnosed end to end through HTTP: probes, a fetched profile, /metrics, the rules.

Only what holds today is asserted (see docs/lab.md for the full table): the KV-gather fault's
true cause ranks first, and its measured figures differ from the healthy server's in the same
run, with margins; nothing here reads the fault's name except to start the server.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

from diagnoser.engine import diagnose, load_rulebook  # noqa: E402
from diagnoser.lab.case import measure, score  # noqa: E402
from diagnoser.lab.faults import FAULTS  # noqa: E402
from diagnoser.lab.process import LabServer, _children  # noqa: E402


def measured(faults, tmp_path):
    server = LabServer(faults, profile_dir=tmp_path)
    with server as url:
        case = measure(url)
    assert not _children(server.proc.pid)
    return case


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return {name: measured([] if name == "none" else [name], tmp_path_factory.mktemp(name)) for name in ("none", "kv-gather")}


def growth(case) -> float:
    points = case.observations.context_sweep
    return points[-1].step_ms / points[0].step_ms


def test_kv_gather_ranks_first(cases):
    result = diagnose(cases["kv-gather"], load_rulebook())
    s = score(result, FAULTS["kv-gather"].cause)
    assert s.rank == 1 and s.grade == "measured"


def test_the_figures_come_from_the_server(cases):
    healthy, faulty = cases["none"], cases["kv-gather"]
    assert growth(faulty) > growth(healthy) * 1.15
    for case in (healthy, faulty):
        o = case.observations
        assert o.budget.launch_ms == 0 and o.budget.device_ms > 0  # a CPU-run budget from the fetched profile
        assert o.boundaries.server_emission_ms and o.boundaries.device_step_ms
        assert o.metrics.itl_ms.mean > 0  # read back from /metrics
