"""``diagnoser analyze``'s work in the stages a person can watch: read the files, find the steps,
extract the facts.

The CLI draws these stages as a progress bar and the TUI's trace job sends them to its own bar;
one sequence here keeps the two from reporting different work. Parsing a large trace is the long
part and happens inside one call, so the stages are what can honestly be counted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only an annotation here: the models are built when the facts are made, not on import
    from diagnoser.models.observations import Observations

STAGES = 3
Say = Callable[[int, int, str], None]


def analyze_in_stages(
    paths: list[str], say: Say, step_range: str | None = None, align: str = "clock", steps_from: str = "auto",
    memory: int | None = None, keep_segments: bool = True,
):
    """(analysis, observations) of the traces at ``paths``; ``say(done, STAGES, what now)`` before each stage and at the end.
    ``memory``: the bytes ranks read at once may hold together (``trace.memory_budget``); ``keep_segments``: keep the
    budget's intervals, for a budget trace (``analysis.analyze_traces``)."""
    from diagnoser.trace.analysis import analyze_traces
    from diagnoser.trace.facts import to_observations
    from diagnoser.trace.load import load_traces

    say(0, STAGES, f"reading {', '.join(Path(p).name for p in paths)}")
    traces = load_traces(paths, memory=memory)
    say(1, STAGES, f"finding steps on {len(traces)} rank(s)")
    analysis = analyze_traces(traces, step_range, align, steps_from, keep_segments)
    say(2, STAGES, f"{len(analysis.steps)} steps: extracting facts")
    observations: Observations = to_observations(analysis)
    say(STAGES, STAGES, f"{len(analysis.steps)} steps analysed")
    return analysis, observations
