"""CUDA-graph replay status of a step, from graph launches versus eager kernel launches.

    launch_starts(trace) -> LaunchStarts      once per rank
    graph_replays(launches, ops, rows, group, host_start, host_end) -> [GraphReplay]   many steps at once

Decode at small batch is launch-bound unless the step replays a captured graph, and engines
fall back to eager mode silently (a batch size that was not captured, a feature that breaks
capture). Counting both kinds of launch inside the step's host window tells which happened.
Work replayed by a graph is counted (it shares the graph launch's correlation id).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnoser.models.observations import GraphStatus
from diagnoser.trace import intervals as iv
from diagnoser.trace.model import RankTrace, RuntimeKind
from diagnoser.trace.ops import DeviceOps


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


def _launched_in(starts: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list[int]:
    return np.maximum(0, np.searchsorted(starts, hi) - np.searchsorted(starts, lo)).tolist()


def graph_replays(
    launches: LaunchStarts, ops: DeviceOps, rows: np.ndarray, group: np.ndarray, host_start: np.ndarray, host_end: np.ndarray
) -> list[GraphReplay]:
    """Each of many steps' replay status at once (``rows`` the steps' ops end to end, ``group`` each
    one's step, the host windows per step): two binary searches and a prefix sum for all of them."""
    graphs = _launched_in(launches.graph, host_start, host_end)
    eager = _launched_in(launches.eager, host_start, host_end)
    graph_ops = iv.group_sums(group, ops.by_graph[rows], len(host_start)).tolist()
    return [GraphReplay(_status(g, e), g, e, n) for g, e, n in zip(graphs, eager, graph_ops)]


def _status(graphs: int, eager: int) -> GraphStatus:
    if graphs == 0:
        return GraphStatus.none
    return GraphStatus.full if eager == 0 else GraphStatus.partial
