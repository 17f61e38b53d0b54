"""Graph-replay probe: the eager path on a CPU, launch counting, and the case update."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch (the gpu extra) is not installed")

from probe_examples import GPU_GRAPHS

from diagnoser.probes.base import ProbeContext
from diagnoser.probes.graphs import EPS, count_launches, make_step, run, to_observations


def test_step_computes_rmsnorm_mlp_residual():
    step = make_step(layers=1, hidden=8, device="cpu")
    x = torch.randn(2, 8)
    out = step(x)
    # recompute by hand with the same seeded weights
    gen = torch.Generator().manual_seed(0)
    w_in = torch.randn(8, 16, generator=gen) / 8**0.5
    w_out = torch.randn(16, 8, generator=gen) / 16**0.5
    h = x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS)
    assert torch.allclose(out, x + torch.nn.functional.silu(h @ w_in) @ w_out, atol=1e-5)


def test_launches_counted_per_layer():
    # per layer: pow, mean, add, rsqrt, mul, mul, matmul, silu, matmul, add
    assert count_launches(make_step(3, 16, "cpu"), torch.randn(1, 16)) == 30


def test_cpu_runs_eager_only_and_says_so():
    facts = run(ProbeContext(options={"graph_batch_sizes": [1, 4], "graph_layers": 2}))
    assert facts.mode == "eager only" and "GPU" in facts.graph_skipped_reason
    assert [p.batch for p in facts.batches] == [1, 4]
    for point in facts.batches:
        assert point.launches_per_step == 20 and point.captured is None and point.graph_step_ms is None
        assert point.eager_us_per_launch == pytest.approx(point.eager_step_ms * 1e3 / 20)
    assert to_observations(facts) == {}


def test_gpu_facts_become_graph_facts_with_unknown_status():
    # the first batch refused capture; the second replayed
    refused, replayed = GPU_GRAPHS.batches[1], GPU_GRAPHS.batches[0]
    graph = to_observations(GPU_GRAPHS.model_copy(update={"batches": [refused, replayed]}))["graph"]
    assert graph.status is None
    assert (graph.launch_cost_us, graph.eager_step_ms, graph.graph_step_ms) == (4.6875, 2.0, 0.5)


def test_memory_guard_refuses_before_allocating():
    from diagnoser.probes.base import ProbeSkipped

    with pytest.raises(ProbeSkipped, match="memory guard"):
        run(ProbeContext(max_memory_fraction=1e-12))
