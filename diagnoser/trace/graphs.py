"""CUDA-graph replay status of a step, from graph launches versus eager kernel launches.

    graph_replay(trace, ops, step) -> GraphReplay

Decode at small batch is launch-bound unless the step replays a captured graph, and engines
fall back to eager mode silently (a batch size that was not captured, a feature that breaks
capture). Counting both kinds of launch inside the step's host window tells which happened.
Work replayed by a graph is counted (it shares the graph launch's correlation id).
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnoser.models.observations import GraphStatus
from diagnoser.trace.model import RankTrace, RuntimeKind
from diagnoser.trace.ops import DeviceOps
from diagnoser.trace.steps import Step


@dataclass(frozen=True)
class GraphReplay:
    status: GraphStatus
    graph_launches: int
    kernel_launches: int  # eager launch calls
    graph_ops: int  # device ops (kernels, memcpy, memset nodes) the graph launches replayed


def graph_replay(trace: RankTrace, ops: DeviceOps, step: Step) -> GraphReplay:
    rt = trace.runtime
    if len(rt):
        inside = (rt["start"] >= step.host_start) & (rt["start"] < step.host_end)
        graphs = int((inside & (rt["kind"] == RuntimeKind.graph_launch)).sum())
        eager = int((inside & (rt["kind"] == RuntimeKind.kernel_launch)).sum())
    else:
        graphs = eager = 0
    rows = step.ops
    graph_ops = int(ops.by_graph[rows].sum())
    if graphs == 0:
        status = GraphStatus.none
    elif eager == 0:
        status = GraphStatus.full
    else:
        status = GraphStatus.partial
    return GraphReplay(status, graphs, eager, graph_ops)
