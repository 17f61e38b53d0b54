"""The lab diagnosed end to end through HTTP: probes, a fetched profile, /metrics, the rules.

What is asserted here holds on any machine: the case is built from what the live server
returned (a CPU-run budget from the fetched profile, emission and device timings, /metrics)
and the engine diagnoses it. How each fault's cause ranks is a timing figure, so it is
measured by ``bench/bench_lab.py`` (the table in docs/lab.md), not asserted under the load
of a test run; a loaded 2-core CI box moves those timings too much for a margin to hold.
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


def test_the_case_comes_from_the_server(cases):
    for case in cases.values():
        o = case.observations
        assert o.budget.launch_ms == 0 and o.budget.device_ms > 0  # a CPU-run budget from the fetched profile
        assert o.boundaries.server_emission_ms and o.boundaries.device_step_ms
        assert o.metrics.itl_ms.mean > 0  # read back from /metrics
        assert len(o.context_sweep) >= 2


def test_the_engine_diagnoses_what_the_server_gave(cases):
    cause = FAULTS["kv-gather"].cause
    result = diagnose(cases["kv-gather"], load_rulebook())
    assert not result.rule_errors
    assert score(result, cause).top is not None  # some cause is ranked; which one is bench_lab's figure
