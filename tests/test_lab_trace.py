"""CPU-only decode traces from the lab: a step budget with the CPU ops as the device part."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnoser.trace.analysis import analyze_traces
from diagnoser.trace.cpu_steps import CPU_DEVICE, _outermost
from diagnoser.trace.facts import to_observations
from diagnoser.trace.kineto import read_kineto

LAB = Path(__file__).parent / "data" / "lab"


def analysis(name: str):
    return analyze_traces([read_kineto(LAB / f"{name}.pt.trace.json.gz")])


@pytest.mark.parametrize("name", ["none", "sort-sampler", "small-experts"])
def test_cpu_decode_trace_gives_a_labelled_budget(name):
    result = analysis(name)
    assert result.method == "profiler_step" and len(result.steps) >= 15
    assert any(n.startswith("rank 0: CPU run") for n in result.notes)
    budget = result.budget()
    assert budget.parts_ns["launch"] == budget.parts_ns["queue"] == 0
    assert budget.parts_ns["device"] > 0 and budget.parts_ns["host"] > 0
    assert sum(budget.parts_ns.values()) == budget.window_ns
    facts = to_observations(result)
    assert facts.budget.device_ms + facts.budget.host_ms == pytest.approx(facts.budget.step_ms)


def share(result, kernel_class: str) -> float:
    total = sum(r.total_us for r in result.kernel_table)
    return sum(r.total_us for r in result.kernel_table if r.kernel_class == kernel_class) / total


def test_faults_show_in_the_cpu_kernel_classes():
    healthy, sort, experts = analysis("none"), analysis("sort-sampler"), analysis("small-experts")
    assert share(sort, "sampling") > 3 * share(healthy, "sampling")
    per_step = lambda r: next(row.count_per_step for row in r.kernel_table if row.kernel_class == "moe")  # noqa: E731
    assert per_step(experts) > 2 * per_step(healthy)


def test_outermost_ops_skip_nested_ones():
    import numpy as np

    start, end = np.array([0, 1, 2, 10, 10]), np.array([9, 3, 3, 12, 11])
    assert _outermost(start, end).tolist() == [0, 3]


def test_gpu_traces_are_not_relabelled():
    trace = read_kineto(LAB.parent / "trace" / "synthetic" / "rank0.json")
    assert len(trace.kernels) and not len(trace.cpu_ops)
    result = analyze_traces([trace])
    assert not any("CPU run" in n for n in result.notes) and trace.device_name != CPU_DEVICE


def test_a_gloo_collective_lasts_until_its_work_ends_and_names_the_late_rank():
    """c10d::allreduce_ only enqueues on the engine thread; the wait for the padded rank 1 happens
    between ops, and the gloo thread's range says when the work ended. Counted to that end, the
    wait is exposed communication and the matched collective names rank 1 as late."""
    result = analyze_traces([read_kineto(LAB / f"straggler-rank{r}.pt.trace.json.gz") for r in (0, 1)])
    facts = to_observations(result)
    assert facts.budget.exposed_comm_ms > 0.1 * facts.budget.step_ms
    (reduce,) = [c for c in facts.collectives if c.op == "all_reduce"]
    assert reduce.implementation == "gloo" and reduce.late_rank == 1
    assert reduce.wait_ms > 0.5 * reduce.interval_ms
