"""Steps of an unmarked eager decode loop, found from its repeating kernel sequence.

Positive cases are built by hand (no permissively licensed unmarked decode trace exists in
shared/); the negatives are real: one vLLM prefill pass and one FastVideo training window,
both periodic by layer or block, neither a sequence of decode steps.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from diagnoser.trace.analysis import analyze_traces
from diagnoser.trace.load import load_traces
from diagnoser.trace.step_pattern import pattern_steps

LAYER = ["rms_norm", "qkv_gemm", "flash_attn", "o_gemm", "rms_norm", "gate_up_gemm", "silu_mul", "down_gemm"]
STEP = ["embedding", *LAYER * 4, "rms_norm", "lm_head_gemm", "argmax"]  # 36 kernels


def decode_loop(steps: int, warmup: tuple[str, ...] = (), kernel_gap_us: float = 10, step_gap_us: float = 300):
    """(names, launch times in ns, D2H launch times in ns) of an eager loop: ``warmup`` kernels,
    then ``steps`` steps, each ending with a copy of the sampled tokens to the host."""
    names, launches, d2h, t = [], [], [], 0.0
    for name in warmup:
        names.append(name)
        launches.append(t)
        t += 50
    for _ in range(steps):
        t += step_gap_us
        for i, name in enumerate(STEP):
            names.append(name)
            launches.append(t)
            t += kernel_gap_us + (3 if i % 7 == 0 else 0)  # uneven, but never near the step gap
        d2h.append(t)
    as_ns = lambda xs: (np.array(xs) * 1e3).astype(np.int64)  # noqa: E731
    return np.array(names), as_ns(launches), as_ns(d2h)


def test_every_step_of_an_eager_loop_is_found_and_warmup_is_left_out():
    names, launches, d2h = decode_loop(6, warmup=("autotune_probe", "autotune_probe"))
    found = pattern_steps(names, launches, d2h)
    assert found.kernels_per_step == len(STEP) == 36
    assert list(found.first) == [2 + 36 * i for i in range(6)]  # each step opens at its embedding
    assert all(names[i] == "embedding" for i in found.first)


@pytest.mark.parametrize("steps", range(3, 11))
def test_every_loop_length_is_cut_whole(steps):
    """Wherever the steady-state search starts (a third of the way in), the step before it is
    seen: the gap before its first kernel was once taken as zero, losing 6-step loops."""
    found = pattern_steps(*decode_loop(steps))
    assert found.kernels_per_step == 36 and list(found.first) == [36 * i for i in range(steps)]


def test_without_a_copy_back_to_the_host_a_repeating_block_is_not_a_step():
    names, launches, _ = decode_loop(6)
    assert pattern_steps(names, launches, np.zeros(0, np.int64)) is None


def test_a_single_forward_pass_stays_one_step():
    """Layers repeat, but the gap before a layer is not consistently the longest."""
    rng = np.random.default_rng(0)
    names = np.array(["embedding", *LAYER * 24, "lm_head_gemm", "argmax"])
    launches = np.cumsum(rng.uniform(8_000, 12_000, len(names))).astype(np.int64)
    assert pattern_steps(names, launches, np.array([launches[-1] + 1])) is None


def test_too_few_steps_are_not_a_pattern():
    assert pattern_steps(*decode_loop(2)) is None


@pytest.mark.parametrize("source", ["decode/TraceLens/eager_trace.json.gz", "nsys/nsys-ai/mfu_2gpu_before.sqlite"])
def test_real_layer_and_block_repeats_stay_whole_trace(shared_dir, source):
    analysis = analyze_traces(load_traces([shared_dir / "data" / source], workers=1))
    assert analysis.method == "whole_trace"


def kineto_loop(tmp_path, steps: int, rank: int = 0, skip: int = 0):
    """The loop above as a Kineto trace of ``rank`` with no ProfilerStep: each kernel runs 5 us
    after its launch for 4 us, and each step ends with a 2 us D2H copy of the sampled token.
    The trace opens ``skip`` kernels into the loop."""
    names, launches, d2h = decode_loop(steps)
    names, launches, d2h = names[skip:], launches[skip:], d2h[d2h > launches[skip]]
    base, events, corr = 1_700_000_000_000_000, [], 0
    for name, t in zip(names, launches // 1000):
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": base + int(t), "dur": 3,
                       "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": base + int(t) + 5, "dur": 4,
                       "args": {"device": 0, "stream": 7, "correlation": corr}})
    for t in d2h // 1000:
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": base + int(t), "dur": 3,
                       "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 7, "ts": base + int(t) + 5,
                       "dur": 2, "args": {"device": 0, "stream": 7, "correlation": corr, "bytes": 8}})
    path = tmp_path / f"rank{rank}.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": rank}, "traceEvents": events}))
    return path


def test_analyze_budgets_each_inferred_step_and_says_how_it_found_them(tmp_path):
    analysis = analyze_traces(load_traces([kineto_loop(tmp_path, 5)], workers=1))
    assert analysis.method == "kernel_pattern" and len(analysis.steps) == 5
    assert any("repeats every 36 launches" in note for note in analysis.notes)
    # A step spans from its first launch to the next step's: 36 launches 10 us apart, 6 of them
    # 3 us later (positions 0, 7, ..., 35), then the 300 us host gap: 360 + 18 + 300 = 678 us.
    assert analysis.median_step_ms == pytest.approx(0.678)
    first = analysis.budget(rank=0, key="pattern#0")
    assert first.kernel_launches == 36


def test_ranks_whose_traces_open_at_different_steps_compare_the_same_steps(tmp_path):
    """Rank 1's trace opens 30 kernels into step 0, so its first whole step is rank 0's second:
    numbering each rank's steps from its own first would compare step 0 with step 1."""
    kineto_loop(tmp_path, 6, rank=0)
    kineto_loop(tmp_path, 6, rank=1, skip=30)
    analysis = analyze_traces(load_traces([tmp_path], workers=1))
    assert analysis.method == "kernel_pattern"
    assert [(s.key, s.ranks) for s in analysis.steps] == [("pattern#0", [0])] + [(f"pattern#{i}", [0, 1]) for i in range(1, 6)]
    for key in (f"pattern#{i}" for i in range(1, 6)):
        r0, r1 = (r for r in analysis.rank_steps if r.key == key)
        assert r0.window_start_ns == r1.window_start_ns  # the same step: one clock, one start
