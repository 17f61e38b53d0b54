"""Eager launches versus CUDA-graph replay for a decode-like step of many small kernels.

A decode step at small batch is hundreds of kernels of a few microseconds each; issued one
by one from Python, the GPU waits on the host between them. Replaying a captured graph
issues them all at once. Timing the same step both ways gives the launch cost per kernel and
the gain a server would see from graphs, and capturing at the requested batch sizes shows
whether capture and replay work for those shapes. On a CPU only the eager path exists, so
that is what is measured and said.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diagnoser.models.observations import GraphReplayObs
from diagnoser.models.probe_results import GraphBatch, GraphsFacts
from diagnoser.probes.base import ProbeContext, ProbeSkipped, bounded_bytes
from diagnoser.probes.timing import median_s, require_device

DEFAULT_BATCH_SIZES = {"cuda": (1, 8, 32, 128), "cpu": (1, 8)}
DEFAULT_LAYERS = {"cuda": 32, "cpu": 8}
HIDDEN = 512
EPS = 1e-6


def make_step(layers: int, hidden: int, device: str) -> Callable[[Any], Any]:
    """A decode-shaped step: per layer an RMS norm, two small GEMMs, an activation and a residual add."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(0)
    params = [
        (
            torch.ones(hidden).to(device),
            (torch.randn(hidden, 2 * hidden, generator=gen) / hidden**0.5).to(device),
            (torch.randn(2 * hidden, hidden, generator=gen) / (2 * hidden) ** 0.5).to(device),
        )
        for _ in range(layers)
    ]

    def step(x: Any) -> Any:
        for norm_w, w_in, w_out in params:
            h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * norm_w
            x = x + torch.nn.functional.silu(h @ w_in) @ w_out
        return x

    return step


def count_launches(step: Callable[[Any], Any], x: Any) -> int:
    """Torch operations one step issues; on a GPU each is at least one kernel launch.

    A torch-function mode counts them in-process and costs microseconds, where the profiler
    cannot start cleanly from the probe's worker thread and a dispatch mode's first use takes
    seconds on a CPU.
    """
    from torch.overrides import TorchFunctionMode

    class Counter(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            Counter.calls += 1
            return func(*args, **(kwargs or {}))

    with Counter():
        step(x)
    return Counter.calls


def graph_replay(ctx: ProbeContext, step: Callable[[Any], Any], x: Any, eager_out: Any) -> dict[str, Any]:
    """Capture the step, check replay gives the eager result, and time the replay."""
    import torch

    static_in = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
        for _ in range(3):
            step(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step(static_in)
    graph.replay()
    torch.cuda.synchronize()
    matches = bool(torch.allclose(static_out, eager_out, rtol=1e-3, atol=1e-3))
    graph_s = median_s(ctx, graph.replay, repeats=7, warmup=3, inner=10)
    return {"captured": True, "replay_matches_eager": matches, "graph_step_ms": graph_s * 1e3}


# the graph figures of a batch that was not replayed: a CPU run, or a capture the GPU refused
NOT_REPLAYED = {"captured": None, "capture_error": None, "replay_matches_eager": None, "graph_step_ms": None}


def measure_batch(ctx: ProbeContext, step: Callable[[Any], Any], batch: int) -> GraphBatch:
    import torch

    x = torch.randn(batch, HIDDEN, device=ctx.device)
    eager_out = step(x)
    eager_s = median_s(ctx, lambda: step(x), repeats=7, warmup=2, inner=5 if ctx.device == "cuda" else 1)
    launches = count_launches(step, x)
    replay: dict[str, Any] = dict(NOT_REPLAYED)
    if ctx.device == "cuda":
        try:
            replay.update(graph_replay(ctx, step, x, eager_out))
        except RuntimeError as err:  # capture refused for this shape: a finding, not a probe failure
            replay.update(captured=False, capture_error=" ".join(str(err).split())[:300])
    eager_ms, graph_ms = eager_s * 1e3, replay["graph_step_ms"]
    return GraphBatch(
        batch=batch,
        eager_step_ms=eager_ms,
        launches_per_step=launches,
        launches_counted_as="torch operations per step",
        eager_us_per_launch=eager_s * 1e6 / launches,
        **replay,
        graph_gain=eager_ms / graph_ms if graph_ms is not None else None,
        launch_cost_us=max(0.0, (eager_ms - graph_ms) * 1e3 / launches) if graph_ms is not None else None,
    )


def run(ctx: ProbeContext) -> GraphsFacts:
    import torch

    require_device(ctx)
    batches = [int(b) for b in ctx.options.get("graph_batch_sizes") or DEFAULT_BATCH_SIZES[ctx.device]]
    layers = int(ctx.options.get("graph_layers") or DEFAULT_LAYERS[ctx.device])
    # weights (hidden x 2 hidden, twice, per layer) plus activations for the largest batch, float32
    needed = 4 * (layers * (4 * HIDDEN * HIDDEN + HIDDEN) + 8 * max(batches) * HIDDEN)
    if bounded_bytes(ctx, needed) < needed:
        raise ProbeSkipped(f"memory guard: the step needs {needed} bytes, more than the allowed share of free memory")
    step = make_step(layers, HIDDEN, ctx.device)
    with torch.inference_mode(False), torch.no_grad():
        points = [measure_batch(ctx, step, b) for b in batches]
    on_gpu = ctx.device == "cuda"
    return GraphsFacts(
        device=ctx.device,
        layers=layers,
        hidden=HIDDEN,
        dtype="float32",
        mode="eager and CUDA graph" if on_gpu else "eager only",
        graph_skipped_reason=None if on_gpu else "CUDA graphs need a GPU; only the eager path was measured",
        batches=points,
    )


def to_observations(facts: GraphsFacts) -> dict[str, Any]:
    """The measured launch cost and step times.

    The probe says nothing about whether the *server* uses graphs, so ``status`` stays unknown;
    the case merge keeps a status a trace already established.
    """
    replayed = [p for p in facts.batches if p.captured]
    if not replayed:
        return {}
    first = replayed[0]
    return {
        "graph": GraphReplayObs(
            launch_cost_us=first.launch_cost_us,
            eager_step_ms=first.eager_step_ms,
            graph_step_ms=first.graph_step_ms,
        )
    }
