"""Where a command's report goes: stdout, or the file ``-o/--output`` names, written whole.

Shared by ``analyze`` and the ``nsys`` subcommands so each takes the option and says what it
wrote the same way: the report on stdout or in the file, one line on stderr per file written.
"""

from __future__ import annotations

from pathlib import Path

import click

output_option = click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="write the report (text, or JSON with --json) to FILE instead of stdout; written whole or not at all",
)


def wrote(path: Path, what: str, aside: str = "") -> None:
    click.echo(f"diagnoser: wrote {what} to {path}{aside}", err=True)


def emit(text: str, output: Path | None) -> None:
    """The report to stdout, or atomically to ``output``."""
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    from diagnoser.fileio import write_atomic

    write_atomic(output, text if text.endswith("\n") else text + "\n")
    wrote(output, "the report")
