"""The options that say where a trace's steps come from, shared by `analyze` and `nsys`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

step_range = click.option(
    "--step-range", "step_range", metavar="NAME", help="segment steps by host ranges (record_function, NVTX) whose name contains NAME"
)
steps_from = click.option(
    "--steps-from",
    type=click.Choice(["auto", "marks", "graphs", "pattern"]),
    default="auto",
    show_default=True,
    help="where steps come from: the first that the trace has (ProfilerStep marks, graph launches, a repeating "
    "kernel sequence), or only the one named, to check an inferred cut against the marked one",
)


def step_options(command: Callable[..., Any]) -> Callable[..., Any]:
    return step_range(steps_from(command))
