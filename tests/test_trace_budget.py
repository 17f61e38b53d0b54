"""The budget, steps, collectives and graph status against the hand-worked synthetic trace
(tests/data/trace/synthetic/README.md gives every number)."""

from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

from diagnoser.trace.analysis import analyze_traces
from diagnoser.trace.facts import to_observations
from diagnoser.trace.load import load_traces

SYNTH = Path(__file__).resolve().parent / "data" / "trace" / "synthetic"


@pytest.fixture(scope="module")
def analysis():
    return analyze_traces(load_traces([SYNTH], workers=1))


def parts_us(analysis, rank, key):
    row = analysis.budget(rank=rank, key=key)
    return {part: ns / 1000 for part, ns in row.parts_ns.items()}, row.window_ns / 1000


def test_rank0_step1_budget_matches_hand_worked_parts(analysis):
    parts, window = parts_us(analysis, 0, "ProfilerStep#1")
    assert window == 100
    assert parts == {"device": 33, "exposed_comm": 20, "launch": 23, "queue": 12, "host": 12}
    assert sum(parts.values()) == window
    # after the last op (98) until step 2's first op (110): 7 us host gap + 5 us queue
    assert analysis.budget(rank=0, key="ProfilerStep#1").between_steps_ns == 12_000


def test_rank1_step1_budget_and_critical_rank(analysis):
    parts, _ = parts_us(analysis, 1, "ProfilerStep#1")
    assert parts == {"device": 48, "exposed_comm": 10, "launch": 8, "queue": 9, "host": 25}
    step1 = next(s for s in analysis.steps if s.key == "ProfilerStep#1")
    # rank 0 spends 20 us waiting in the all-reduce, rank 1 only 10: rank 1 is the one the step waits for
    assert step1.critical_rank == 1


def test_hta_view_of_a_step(analysis):
    hta = analysis.budget(rank=0, key="ProfilerStep#1").hta
    assert (hta.span_us, hta.idle_us, hta.compute_us, hta.non_compute_us) == (88, 33, 33, 22)
    assert hta.comm_comp_overlap == pytest.approx(5 / 25)


def test_collective_wait_transfer_and_late_rank(analysis):
    (coll,) = analysis.collectives
    assert (coll.op, coll.implementation, coll.ranks) == ("all_reduce", "nccl", [0, 1])
    assert (coll.wait_us, coll.transfer_us, coll.interval_us) == (15, 10, 25)
    assert coll.late_rank == 1 and coll.late_rank_compute_us == 48


def test_graph_ops_are_counted_and_status_is_partial(analysis):
    row = analysis.budget(rank=0, key="ProfilerStep#2")
    assert (row.graph_status, row.graph_launches, row.kernel_launches, row.graph_ops) == ("partial", 1, 1, 2)
    # the two replayed kernels (4 + 4 us) are device time; the 1 us gaps inside the graph are queueing
    assert row.parts_ns == {"device": 28000, "exposed_comm": 0, "launch": 0, "queue": 2000, "host": 0}


def test_observations_carry_the_critical_budget_and_label_kernel_sums(analysis):
    obs = to_observations(analysis)
    assert obs.budget.parts_ms == pytest.approx(obs.budget.step_ms)
    assert {b.rank for b in obs.rank_budgets} == {0, 1}
    # 5 + 3 kernels of rank 0 (20+10+25+3+20+4+4 = 86 us) and 4 of rank 1 (20+28+10+20 = 78 us)
    assert obs.kernel_sum_across_ranks_ms == pytest.approx((86 + 78) / 1000)
    # critical rank 0 of the representative step: a 12 us gap after step 1; the last step has none to measure
    assert obs.host.gap_between_steps_ms == pytest.approx(0.012)
    (coll,) = obs.collectives
    assert coll.wait_ms == pytest.approx(0.015) and coll.late_rank == 1 and coll.group_size == 2


def test_kernel_table_geometry(analysis):
    # the representative step is the lower median of (100 us, 30 us): step 2, whose critical rank is 0
    assert analysis.representative == "ProfilerStep#2" and analysis.budget().rank == 0
    table = {(r.kernel_class, r.implementation): r for r in analysis.kernel_table}
    comm = table[("communication", "nccl")]
    assert comm.median_grid_ctas == 2 and comm.sm_count == 100 and comm.underfilled is True
    gemm = table[("gemm", None)]
    # rank 0 GEMMs over both steps: 20, 10, 20 and the 4 us one replayed by the graph
    assert gemm.count == 4 and gemm.count_per_step == 2 and gemm.median_us == 15 and gemm.total_us == 54


def test_gemm_roofline_from_recorded_shapes(analysis):
    gemm = next(r for r in analysis.kernel_table if r.kernel_class == "gemm")
    assert gemm.priced_ops == 1
    assert gemm.achieved_tflops == pytest.approx(2_147_483_648 / 20e-6 / 1e12)
    assert gemm.achieved_tbs == pytest.approx(34_603_008 / 20e-6 / 1e12)
    assert gemm.flops_fraction == pytest.approx(107.374 / 989, rel=1e-4)
    assert gemm.bw_fraction == pytest.approx(1.73015 / 3.35, rel=1e-4)
    assert gemm.roofline_bound == "memory" and gemm.roof_fraction == pytest.approx(gemm.bw_fraction)
    obs = {k.kernel_class: k for k in to_observations(analysis).kernel_classes}
    assert obs["gemm"].achieved_bw_fraction == pytest.approx(gemm.bw_fraction)


def test_collective_alignment_recovers_a_skewed_clock(tmp_path):
    import json

    for rank, shift in ((0, 0), (1, 1000)):  # rank 1's host clock runs 1 ms ahead
        doc = json.loads((SYNTH / f"rank{rank}.json").read_text())
        for e in doc["traceEvents"]:
            if "ts" in e:
                e["ts"] += shift
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(doc))
    skewed = analyze_traces(load_traces([tmp_path], workers=1))
    assert skewed.collectives[0].wait_us == 1015  # on raw clocks rank 1 seems to arrive 1 ms late
    aligned = analyze_traces(load_traces([tmp_path], workers=1), align="collective")
    coll = aligned.collectives[0]
    assert (coll.wait_us, coll.transfer_us, coll.late_rank) == (15, 10, 1)
    assert any("shifted by -1000.0 µs" in n for n in aligned.notes)


def _graph_trace(tmp_path, launch_times_us, kernels=((10, 30), (45, 20))):
    """A Kineto trace of cudaGraphLaunch calls (no annotations), each replaying ``kernels``
    given as (start after the launch, duration) in microseconds."""
    import json

    base, events = 1_700_000_000_000_000, []
    for n, t0 in enumerate(launch_times_us):
        corr = 10 + n
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1,
                       "ts": base + t0, "dur": 8, "args": {"correlation": corr}})
        for j, (start, dur) in enumerate(kernels):
            events.append({"ph": "X", "cat": "kernel", "name": f"gemv_{j}", "pid": 0, "tid": 7, "ts": base + t0 + start,
                           "dur": dur, "args": {"stream": 7, "correlation": corr, "device": 0}})
    path = tmp_path / "graphs.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_steps_from_repeated_graph_launches_without_annotations(tmp_path):
    """A decode loop under full CUDA graphs: one cudaGraphLaunch per step, no ProfilerStep."""
    path = _graph_trace(tmp_path, [0, 100, 200])
    analysis = analyze_traces(load_traces([path], workers=1))
    assert analysis.method == "graph_launch" and len(analysis.steps) == 3
    first = analysis.budget(rank=0, key="graph#0")
    assert (first.graph_status, first.graph_launches, first.kernel_launches, first.graph_ops) == ("full", 1, 0, 2)
    # window 10 -> 110: kernels 30 + 20 us; queueing: the 5 us gap inside the graph (already launched) and
    # 108 -> 110 (next graph launch returned, its first kernel not started); host: 65 -> 108, the gap after
    # the step's last kernel while the next launch had not been issued
    assert first.parts_ns == {"device": 50_000, "exposed_comm": 0, "launch": 0, "queue": 7_000, "host": 43_000}
    assert analysis.median_step_ms == pytest.approx(0.1)  # windows 100, 100 and the last one 55 us


def test_piecewise_graphs_group_launches_into_steps(tmp_path):
    """Piecewise graphs: 3 launches per step 12 us apart, steps 200 us apart; the trace opens
    mid-step with two stray pieces, whose work is counted as unassigned, not dropped."""
    launches = [0, 12] + [100 + 200 * step + 12 * piece for step in range(4) for piece in range(3)]
    path = _graph_trace(tmp_path, launches, kernels=((2, 5),))
    analysis = analyze_traces(load_traces([path], workers=1))
    assert analysis.method == "graph_launch" and len(analysis.steps) == 4
    first = analysis.budget(rank=0, key="graph#0")
    assert (first.graph_launches, first.graph_ops) == (3, 3)
    assert analysis.median_step_ms == pytest.approx(0.2)
    assert any("3 graph launches per step" in note for note in analysis.notes)
    assert analysis.unassigned_ops[0] == 2


def test_launch_grouping_falls_back_to_one_launch_per_step():
    from diagnoser.trace.graph_steps import graph_launches_per_step

    assert graph_launches_per_step(np.array([0, 100, 205, 298, 400])) == (1, 0)  # even spacing: full graphs
    assert graph_launches_per_step(np.array([0, 10, 20, 100, 110, 120, 200, 210, 220])) == (3, 0)
    # a 60 us gap inside the third step (a sync, say) breaks the pattern: no grouping is claimed
    assert graph_launches_per_step(np.array([0, 10, 20, 100, 110, 120, 200, 260, 270, 300, 310, 320])) == (1, 0)


def test_unlike_launch_groups_are_parts_of_one_step():
    """Draft and target graphs alternate (a speculative decoder), 80 and 120 us apart: the gaps
    alone make every launch a step; what each launch replayed joins draft and target."""
    from diagnoser.trace.graph_steps import graph_launches_per_step

    starts = np.cumsum([0] + [80, 120] * 5)
    draft_then_target = np.array([3, 20] * 6)
    assert graph_launches_per_step(starts) == (1, 0)
    assert graph_launches_per_step(starts, draft_then_target) == (2, 0)  # each step opens after the 120 us gap
    assert graph_launches_per_step(starts[1:], draft_then_target[1:]) == (2, 1)  # a trace that opens mid-step
    assert graph_launches_per_step(starts, np.full(12, 7)) == (1, 0)  # alike launches: one per step


def test_real_training_steps_cut_three_ways_agree(shared_dir):
    """The HTA trace has ProfilerStep marks, graph launches and a repeating kernel sequence.
    Each step replays 14 graphs in two groups with a long host gap before each: grouping by gaps
    alone gave 10 alternating 'steps' of 419 and 956 ops. The marked steps hold 1,375 ops and
    take 209.7, 216.5, 216.1, 215.5 and 216.2 ms; the whole steps cut from the graph launches or
    from the kernel sequence hold the same ops and take the same time, at another phase."""
    from diagnoser.trace.ops import device_ops
    from diagnoser.trace.steps import segment_steps

    (trace,) = load_traces([shared_dir / "data" / "hta" / "negative_queue_length_values_check" / "rank0.json.gz"], workers=1)
    ops = device_ops(trace)
    marked = segment_steps(trace, ops)
    assert marked.method == "profiler_step" and [len(s.ops) for s in marked.steps] == [1375] * 5
    graphs = segment_steps(trace, ops, steps_from="graphs")
    assert graphs.method == "graph_launch" and "14 graph launches per step" in graphs.notes[0]
    pattern = segment_steps(trace, ops, steps_from="pattern")
    assert pattern.method == "kernel_pattern" and "repeats every 1075 launches" in pattern.notes[0]
    for whole in (graphs.steps, pattern.steps):  # the trace ends inside a fifth step, left out of both
        assert len(whole) == 4 and [len(s.ops) for s in whole] == [1375] * 4
        assert all(215 < (s.host_end - s.host_start) / 1e6 < 217 for s in whole)
    # the last whole step's device window closes where the left-out step's work begins; it used to
    # run on through the queue's drain (264.5 ms against 216 for the others)
    for source in ("graphs", "pattern"):
        budgets = analyze_traces([trace], steps_from=source).steps
        assert len(budgets) == 4 and all(215 < b.step_ms < 217.5 for b in budgets), [b.step_ms for b in budgets]


def test_a_forced_source_of_steps_the_trace_lacks_is_one_line(tmp_path):
    path = _graph_trace(tmp_path, [0, 100, 200])
    done = run_cli("analyze", str(path), "--steps-from", "marks")
    assert done.returncode == 2 and done.stderr.strip().endswith("--steps-from marks: no ProfilerStep ranges in the trace")
    done = run_cli("analyze", str(path), "--steps-from", "pattern")
    assert done.returncode == 2 and "no kernel sequence that repeats" in done.stderr


def test_host_to_device_copies_are_measured_and_split_by_overlap(tmp_path):
    """One step: a 40 us pageable H2D copy of 4 MB (5-45 us) and a kernel on another stream
    (25-65 us). The window is 5-65 us, all device time; 20 us of the copy has no kernel beside it."""
    import json

    base = 1_700_000_000_000_000
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": base, "dur": 100},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": base + 1, "dur": 3,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 8, "ts": base + 5,
         "dur": 40, "args": {"device": 0, "stream": 8, "correlation": 1, "bytes": 4_000_000}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": base + 10, "dur": 5,
         "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "gemv_0", "pid": 0, "tid": 7, "ts": base + 25, "dur": 40,
         "args": {"device": 0, "stream": 7, "correlation": 2}},
    ]
    path = tmp_path / "h2d.json"
    path.write_text(json.dumps({"traceEvents": events}))
    analysis = analyze_traces(load_traces([path], workers=1))
    row = analysis.budget()
    assert (row.h2d_ns, row.h2d_exposed_ns, row.h2d_bytes) == (40_000, 20_000, 4_000_000)
    assert row.parts_ns["device"] == 60_000  # the copy stays in the device part; the fields say how much is PCIe
    budget = to_observations(analysis).budget
    assert (budget.h2d_ms, budget.h2d_exposed_ms, budget.h2d_bytes) == (0.04, 0.02, 4_000_000)
