"""Every lab fault diagnosed end to end, without the test or the diagnosis knowing which is on.

For each fault a lab server starts with that fault alone; the case is built only from what
the server answers over HTTP (client probe, context sweep, a stream beside a long prompt, a
profile fetched through /start_profile, /metrics, /server_info); the bundled rules diagnose
it. The fault's name is used twice, both outside the measurement: to start the server, and
to look up the rule id the answer is scored against.

Each round takes 15-40 s on a 2-core box, so the suite runs the faults whose margins held in
every run there (``IN_SUITE``); ``DIAGNOSER_LAB_E2E=1`` runs all of them and the healthy
server. On a shared 2-core box the rest are not yet reliable: an output-length slope over
three 256-token streams, or a host share against an unprofiled twin, moves with the machine's
own drift. The figures are ``bench/bench_lab.py``'s.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

from diagnoser.engine import diagnose, load_rulebook  # noqa: E402
from diagnoser.lab.case import measure, measured_above_noise, score  # noqa: E402
from diagnoser.lab.faults import FAULTS  # noqa: E402
from diagnoser.lab.process import LabServer, _children  # noqa: E402

IN_SUITE = ("buffered-stream", "detok-inline", "kv-gather", "prefill-stall")
EVERY_FAULT = os.environ.get("DIAGNOSER_LAB_E2E") == "1"
FAULTY = sorted(name for name in FAULTS if name != "none" and (EVERY_FAULT or name in IN_SUITE))


@pytest.fixture(scope="module")
def book():
    return load_rulebook()


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """Each fault's case, measured once from its own live server."""
    cases = {}

    def case(name: str):
        if name not in cases:
            server = LabServer([] if name == "none" else [name], profile_dir=tmp_path_factory.mktemp(name))
            with server as url:
                cases[name] = measure(url)
            assert not _children(server.proc.pid)  # the server left no process behind
        return cases[name]

    return case


def diagnosed(name: str, book, measured):
    result = diagnose(measured(name), book)
    assert not result.rule_errors
    return result


def test_the_case_comes_from_the_server(measured):
    o = measured("prefill-stall").observations
    assert o.budget.launch_ms == 0 and o.budget.device_ms > 0  # a CPU-run budget from the fetched profile
    assert o.boundaries.server_emission_ms and o.boundaries.device_step_ms  # the stream's stamps
    assert o.metrics.itl_ms.mean > 0  # read back from /metrics
    assert len(o.context_sweep) == 3 and o.stream.worst_stall_ms > 0
    assert o.server.chunked_prefill is False and o.server.sampling == "greedy"  # from /server_info


# small-experts: a CPU trace gives no rows per expert or achieved bandwidth, the facts that tell a
# per-expert GEMM loop from one grouped GEMM; until it does, the rule cannot name it from the lab.
KNOWN_GAPS = {"small-experts": "a CPU trace measures neither rows per expert nor achieved bandwidth"}


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_GAPS[n], strict=True)) if n in KNOWN_GAPS else n for n in FAULTY]
)
def test_the_true_cause_ranks_first(name, book, measured):
    s = score(diagnosed(name, book, measured), FAULTS[name].cause)
    assert s.rank == 1, f"{name}: {FAULTS[name].cause} ranked {s.rank} (first: {s.top})"
    assert s.grade == "measured"


@pytest.mark.skipif(not EVERY_FAULT, reason="the healthy server's host share is not yet reliable on a shared box: DIAGNOSER_LAB_E2E=1")
def test_the_healthy_server_shows_no_measured_cause_above_noise(book, measured, tmp_path):
    """A cause is believed when a second server, measured afresh, shows it again: on a shared
    2-core box one sweep point or one profiled window can be 20 % off, and a cause seen in only
    one of two runs is that noise, not the server."""
    first = set(measured_above_noise(diagnosed("none", book, measured)))
    if first:
        with LabServer([], profile_dir=tmp_path) as url:
            again = diagnose(measure(url), book)
        first &= set(measured_above_noise(again))
    assert first == set()
