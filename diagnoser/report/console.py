"""The console text reports print to."""

from __future__ import annotations

import sys

from rich.console import Console

# Piped or redirected output has no terminal width; rich would fall back to 80 columns and
# squeeze wide tables (kernel names, per-rank columns) into unreadable stubs.
PIPE_WIDTH = 160


def stdout_console() -> Console:
    width = None if sys.stdout.isatty() else PIPE_WIDTH
    return Console(file=sys.stdout, width=width, highlight=False)


def text_console() -> Console:
    """A console that renders into a string (``console.file.getvalue()``), for reports saved with -o."""
    import io

    return Console(file=io.StringIO(), width=PIPE_WIDTH, highlight=False, color_system=None)
