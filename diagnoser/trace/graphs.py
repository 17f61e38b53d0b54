"""CUDA-graph replay status of a step, from graph launches versus eager kernel launches.

    launch_starts(trace) -> LaunchStarts      once per rank
    graph_replay(launches, ops, step) -> GraphReplay

Decode at small batch is launch-bound unless the step replays a captured graph, and engines
fall back to eager mode silently (a batch size that was not captured, a feature that breaks
capture). Counting both kinds of launch inside the step's host window tells which happened.
Work replayed by a graph is counted (it shares the graph launch's correlation id).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


@dataclass(frozen=True)
class LaunchStarts:
    """A rank's graph and eager kernel launch times, sorted once: each step then counts its own by
    two binary searches instead of a pass over every runtime call of the trace."""

    graph: np.ndarray
    eager: np.ndarray


def launch_starts(trace: RankTrace) -> LaunchStarts:
    rt = trace.runtime
    if not len(rt):
        return LaunchStarts(np.zeros(0, np.int64), np.zeros(0, np.int64))
    return LaunchStarts(
        np.sort(rt["start"][rt["kind"] == RuntimeKind.graph_launch]),
        np.sort(rt["start"][rt["kind"] == RuntimeKind.kernel_launch]),
    )


def _launched_in(starts: np.ndarray, lo: int, hi: int) -> int:
    return max(0, int(np.searchsorted(starts, hi) - np.searchsorted(starts, lo)))


def graph_replay(launches: LaunchStarts, ops: DeviceOps, step: Step) -> GraphReplay:
    graphs = _launched_in(launches.graph, step.host_start, step.host_end)
    eager = _launched_in(launches.eager, step.host_start, step.host_end)
    graph_ops = int(ops.by_graph[step.ops].sum())
    if graphs == 0:
        status = GraphStatus.none
    elif eager == 0:
        status = GraphStatus.full
    else:
        status = GraphStatus.partial
    return GraphReplay(status, graphs, eager, graph_ops)
