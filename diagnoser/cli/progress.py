"""A progress bar on stderr for long commands, drawn only when stderr is a terminal.

Piped or captured output (CI logs, ``2> file``, the tests) gets nothing from here, so what a
command prints there stays exactly what it printed before; a person at a terminal sees the bar,
and lines the command says meanwhile scroll above it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Update = Callable[..., None]


def _drawn() -> bool:
    return sys.stderr.isatty()


@contextmanager
def progress(label: str, total: float | None) -> Iterator[Update]:
    """``update(completed=..., text=...)`` moves the bar and says what is happening; a no-op off a terminal."""
    if not _drawn():
        yield lambda **_: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("[bold]{task.fields[label]}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=Console(stderr=True), transient=True)
    with bar:
        task = bar.add_task("", total=total, label=label)

        def update(completed: float | None = None, text: str | None = None) -> None:
            bar.update(task, **({"completed": completed} if completed is not None else {}), **({"description": text} if text is not None else {}))

        yield update

