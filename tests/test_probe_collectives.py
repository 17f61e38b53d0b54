"""Collectives probe: real torchrun + gloo ranks, and the timeline arithmetic by hand."""

from __future__ import annotations

import os
import sys
import time

import pytest

from diagnoser.errors import InputError
from diagnoser.models.observations import CollectiveObs
from diagnoser.probes import collectives
from diagnoser.probes.base import ProbeContext, ProbeSkipped, ProbeTimeout
from diagnoser.probes.collective_timeline import CallRecord, bus_bandwidth_gbs, summarise
from conftest import needs_torch
from probe_examples import collective, collectives_facts

from diagnoser.models.probe_results import InjectedDelay

MS = 1_000_000  # ns


def rec(rank, iteration, arrival_ms, departure_ms, compute_ms, op="all_reduce", size=1024):
    return CallRecord(
        rank=rank,
        op=op,
        message_bytes=size,
        iteration=iteration,
        arrival_ns=int(arrival_ms * MS),
        departure_ns=int(departure_ms * MS),
        compute_ns=int(compute_ms * MS),
    )


def test_timeline_splits_wait_from_transfer_by_hand():
    # Three ranks. Iteration 0: arrivals 0, 2, 10 ms; all leave at 11 ms (rank 2 late by 8 ms
    # over rank 1, transfer 1 ms). Iteration 1: arrivals 20, 21, 26; departures 27, 27, 28.
    records = [
        rec(0, 0, 0, 11, 1), rec(1, 0, 2, 11, 3), rec(2, 0, 10, 11, 9),
        rec(0, 1, 20, 27, 2), rec(1, 1, 21, 27, 4), rec(2, 1, 26, 28, 12),
    ]  # fmt: skip
    (s,) = summarise(records, group_size=3)
    assert s.iterations == 2 and s.late_rank == 2 and s.late_fraction == 1.0
    # intervals: 11 - 0 = 11 and 28 - 20 = 8 -> median 9.5
    assert s.interval_ms == pytest.approx(9.5)
    # transfer per iteration = median over ranks of departure - last arrival: 1 and median(1,1,2)=1
    assert s.transfer_ms == pytest.approx(1.0)
    # wait = last - first: 10 and 6 -> median 8
    assert s.wait_ms == pytest.approx(8.0)
    # rank 2 alone held the call up by 10-2 = 8 and 26-21 = 5 ms -> median 6.5, mean 6.5
    assert s.late_by_ms == pytest.approx(6.5)
    assert s.hold_up_ms == pytest.approx([0.0, 0.0, 6.5])
    # rank 0 waited 10 and 6 -> 8; rank 1 waited 8 and 5 -> 6.5; rank 2 never waited
    assert s.mean_wait_ms == pytest.approx([8.0, 6.5, 0.0])
    # late rank's prior work: median(9, 12) = 10.5; others: median(1, 3, 2, 4) = 2.5
    assert s.preceding_compute_ms == pytest.approx(10.5)
    assert s.extra_compute_ms == pytest.approx(8.0)
    # bus bandwidth: 1024 B * 2*(3-1)/3 over 1 ms = 1.365 MB/s
    assert s.bus_bandwidth_gbs == pytest.approx(1024 * 4 / 3 / 1e-3 / 1e9)


def test_timeline_drops_iterations_missing_a_rank():
    records = [rec(0, 0, 0, 5, 0), rec(1, 0, 3, 5, 3), rec(0, 1, 10, 12, 5)]
    (s,) = summarise(records, group_size=2)
    assert s.iterations == 1 and s.late_rank == 1 and s.wait_ms == pytest.approx(3.0)


def test_bus_bandwidth_conventions():
    assert bus_bandwidth_gbs("all_to_all", 8_000_000, 4, 1.0) == pytest.approx(8e6 * 0.75 / 1e-3 / 1e9)
    assert bus_bandwidth_gbs("broadcast", 1000, 2, 1.0) is None
    assert bus_bandwidth_gbs("all_reduce", 1000, 2, 0.0) is None


def test_message_sizes_follow_decode_shapes():
    # batch x hidden x 2 bytes (bf16): 8 x 7168 x 2 = 114688
    assert collectives.message_sizes({"hidden": 7168, "batch_sizes": [1, 8]}) == [14336, 114688]
    assert collectives.message_sizes({"message_bytes": [4096]}) == [4096]
    # the model preset's hidden width (Qwen2.5 7B: 3584) when no width is given
    assert collectives.message_sizes({"model": "qwen2.5-7b", "batch_sizes": [2]}) == [2 * 3584 * 2]
    with pytest.raises(InputError, match="message size"):
        collectives.message_sizes({"message_bytes": [0]})


def test_bad_options_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="delay_rank 5"):
        collectives.torchrun_command(tmp_path, "gloo", 2, [1024], {"delay_rank": 5}, 10)
    with pytest.raises(InputError, match="unknown op"):
        collectives.torchrun_command(tmp_path, "gloo", 2, [1024], {"collective_ops": ["broadcast"]}, 10)


def test_observations_keep_one_entry_per_op_at_the_largest_message():
    items = [collective("all_reduce", 1024, 5.0), collective("all_reduce", 65536, 7.0), collective("all_to_all", 1024, 3.0)]
    obs = collectives.to_observations(collectives_facts(items, backend="gloo"))["collectives"]
    assert [(o.op, o.message_bytes, o.wait_ms) for o in obs] == [("all_reduce", 65536, 7.0), ("all_to_all", 1024, 3.0)]
    # algorithm bandwidth, as trace ingest reports it: 65,536 B over a 1 ms transfer = 0.065536 GB/s
    assert obs[0].effective_bandwidth_gbs == pytest.approx(65536 / 1e-3 / 1e9)
    assert collectives.to_observations(collectives_facts([])) == {}


def test_probe_collectives_fill_a_case_without_any_but_never_replace_the_served_steps():
    from diagnoser.models.observations import CollectiveObs, Observations
    from diagnoser.probes.to_case import merge_observations

    updates = collectives.to_observations(collectives_facts([collective("all_reduce", 65536, 7.0)], backend="gloo"))
    assert merge_observations(Observations(), updates).collectives[0].implementation == "gloo"
    traced = Observations(collectives=[CollectiveObs(op="all_reduce", implementation="nccl", interval_ms=0.4, wait_ms=0.1)])
    assert merge_observations(traced, updates).collectives == traced.collectives


def running(pid: int) -> bool:
    """Alive and not a zombie (an unreaped zombie still answers kill(pid, 0))."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_failed_launch_names_the_error_line():
    command = [sys.executable, "-c", "print('banner'); raise ValueError('rank 1 has no GPU')"]
    with pytest.raises(RuntimeError, match="exited with 1: ValueError: rank 1 has no GPU"):
        collectives.launch(command, dict(os.environ), timeout_s=30)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc to see process states")
def test_launch_timeout_kills_the_whole_process_group(tmp_path):
    pid_file = tmp_path / "child.pid"
    # the launcher starts a grandchild, as torchrun starts ranks; both must die at the deadline
    script = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(60)"
    )
    with pytest.raises(ProbeTimeout, match="within 2 s"):
        collectives.launch([sys.executable, "-c", script], dict(os.environ), timeout_s=2)
    grandchild = int(pid_file.read_text())
    for _ in range(50):
        if not running(grandchild):
            break
        time.sleep(0.1)
    assert not running(grandchild)


def test_rank_count_is_bounded_by_cores_and_memory():
    too_many = (os.cpu_count() or 1) + 3
    with pytest.raises(InputError, match=f"{too_many} ranks on"):
        collectives.check_rank_budget(ProbeContext(), too_many)
    # 2 ranks at 512 MiB each cannot fit in a millionth of the free memory
    with pytest.raises(ProbeSkipped, match="2 ranks need about 1.0 GiB"):
        collectives.check_rank_budget(ProbeContext(max_memory_fraction=1e-6), 2)
    collectives.check_rank_budget(ProbeContext(max_memory_fraction=1.0), 2)


@needs_torch
def test_single_rank_is_skipped():
    with pytest.raises(ProbeSkipped, match="at least 2 ranks"):
        collectives.run(ProbeContext(options={"ranks": 1}))


@needs_torch
def test_gloo_ranks_attribute_injected_delay_to_rank_1():
    ctx = ProbeContext(
        device="cpu",
        timeout_s=120,
        options={"ranks": 2, "delay_rank": 1, "delay_ms": 20, "collective_iterations": 8, "batch_sizes": [8], "hidden": 4096},
    )
    facts = collectives.run(ctx)
    assert facts.backend == "gloo" and facts.world_size == 2 and facts.dtype == "float32"
    assert facts.injected_delay == InjectedDelay(rank=1, ms=20.0)
    assert facts.late_rank == 1
    assert {c.op for c in facts.collectives} == {"all_reduce", "all_to_all"}
    for item in facts.collectives:
        assert item.message_bytes == 8 * 4096 * 2
        assert item.late_rank == 1
        assert item.late_by_ms == pytest.approx(20.0, rel=0.2)
        assert item.hold_up_ms[1] == pytest.approx(20.0, rel=0.2)
        assert item.hold_up_ms[0] < 2.0
        assert item.mean_wait_ms[0] == pytest.approx(20.0, rel=0.2)
        assert item.extra_compute_ms == pytest.approx(20.0, rel=0.2)
        assert item.interval_ms >= item.wait_ms + item.transfer_ms * 0.5
    obs = {o.op: o for o in collectives.to_observations(facts)["collectives"]}["all_reduce"]
    assert isinstance(obs, CollectiveObs) and obs.late_rank == 1 and obs.implementation == "gloo"
    assert obs.wait_ms == pytest.approx(20.0, rel=0.2)


def test_failed_launch_names_the_rank_error_under_torchrun_wrapper():
    # what torchrun prints when a rank dies: the rank's line first, then its own traceback
    script = (
        "import sys; "
        "print('python3: Error while finding module specification for x (ModuleNotFoundError: No module named x)'); "
        "print('Traceback (most recent call last):'); print('    raise ChildFailedError('); "
        "print('torch.distributed.elastic.multiprocessing.errors.ChildFailedError: '); sys.exit(1)"
    )
    with pytest.raises(RuntimeError, match=r"exited with 1: python3: Error while finding module specification"):
        collectives.launch([sys.executable, "-c", script], dict(os.environ), timeout_s=30)


@needs_torch
def test_ranks_start_in_their_scratch_folder_not_the_callers(tmp_path, monkeypatch):
    # Ranks start with `python -m`, so the working folder leads sys.path. Run from a source
    # checkout against a plain (non-editable) install, the checkout's diagnoser/ shadowed the
    # installed package and every rank died on "No module named 'diagnoser.probes'" (seen in a
    # rehearsal of bench/device_check.sh). The editable install used here hides that, so check
    # where the ranks are started instead.
    seen = {}

    class Stop(Exception):
        pass

    def fake_launch(command, env, timeout_s, cwd=None):
        seen.update(cwd=cwd, module=command[command.index("-m", 3) + 1])
        raise Stop

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(collectives, "launch", fake_launch)
    with pytest.raises(Stop):
        collectives.run(ProbeContext(device="cpu", timeout_s=60, options={"ranks": 2}))
    assert seen["module"] == "diagnoser.probes.collective_worker"
    assert seen["cwd"] is not None and seen["cwd"] != tmp_path and seen["cwd"].name.startswith("diagnoser-collectives-")


def test_launch_runs_in_the_folder_it_is_given(tmp_path):
    marker = tmp_path / "here"
    script = "import os, pathlib; pathlib.Path('here').write_text(os.getcwd())"
    collectives.launch([sys.executable, "-c", script], dict(os.environ), timeout_s=30, cwd=tmp_path)
    assert marker.read_text() == str(tmp_path)
