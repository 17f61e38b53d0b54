"""A Chrome/Perfetto trace of the budget, to open beside the original trace.

    perfetto_trace(analysis) -> bytes

One process per rank, one track per budget part, one slice per labelled interval, plus a
"steps" track that marks each step window and whether this rank was the critical one. Times
are on the common clock, in microseconds since the earliest step window (epoch nanoseconds
would lose sub-microsecond precision as the Chrome format's float microseconds).
"""

from __future__ import annotations

import orjson

from diagnoser.trace.analysis import Analysis
from diagnoser.trace.budget import PARTS


def perfetto_trace(analysis: Analysis) -> bytes:
    critical = {s.key: s.critical_rank for s in analysis.steps}
    events: list[dict] = []
    origin = min((r.window_start_ns for r in analysis.rank_steps), default=0)
    for rank in analysis.ranks:
        pid = f"diagnoser rank {rank}"
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": pid}})
        for order, track in enumerate(("steps",) + PARTS):
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": track, "args": {"name": track}})
            events.append(
                {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": track, "args": {"sort_index": order}}
            )
    for row in analysis.rank_steps:
        pid = f"diagnoser rank {row.rank}"
        on_path = critical.get(row.key) == row.rank
        events.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": "steps",
                "name": f"{row.step}{' (critical rank)' if on_path else ''}",
                "ts": (row.window_start_ns - origin) / 1000,
                "dur": row.window_ns / 1000,
                "args": {"critical_path": on_path, **{f"{p}_us": v / 1000 for p, v in row.parts_ns.items()}},
            }
        )
        for part, segments in row.segments.items():
            for start, end in segments:
                events.append(
                    {
                        "ph": "X",
                        "pid": pid,
                        "tid": part,
                        "name": part,
                        "ts": (start - origin) / 1000,
                        "dur": (end - start) / 1000,
                        "args": {"step": row.step, "critical_path": on_path},
                    }
                )
    return orjson.dumps(
        {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"generator": "diagnoser analyze"}}
    )
