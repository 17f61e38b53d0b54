"""``diagnoser case from FILE...``: a case from the files an engineer already has.

Benchmark results, server logs, metrics scrapes, command lines and ``nvidia-smi`` output are
recognised by content, read and merged; the case names the source of every fact. What the
files disagree on is printed side by side (and kept as comments at the top of the case).
"""

from __future__ import annotations

from pathlib import Path

import click

from diagnoser.errors import InputError


def parse_run(text: str) -> tuple[str, list[str]]:
    """``NAME:FILE[,FILE...]``: a run's name and its artifacts."""
    name, sep, files = text.partition(":")
    paths = [f for f in files.split(",") if f]
    if not sep or not name.strip() or not paths:
        raise InputError(f"--run {text!r}: write NAME:FILE[,FILE...], e.g. --run eager:eager.json,eager.log")
    return name.strip(), paths


def report_import(imported, prefix: str) -> None:
    """What was read as what, what disagrees and what the files did not state, on stderr."""
    for file, kind in imported.formats:
        click.echo(f"{prefix}: read {file} as {kind}", err=True)
    for line in imported.disagreements():
        click.echo(f"{prefix}: disagree: {line}", err=True)
    for line in imported.set_aside:
        click.echo(f"{prefix}: set aside: {line}", err=True)
    for line in imported.facts.missing:
        click.echo(f"{prefix}: not stated: {line}", err=True)


@click.group("case")
def case() -> None:
    """Build a case from artifacts: benchmark results, logs, scrapes, command lines, nvidia-smi."""


@case.command("from")
@click.argument("files", nargs=-1, metavar="FILE...")
@click.option("-o", "--output", "output", type=click.Path(path_type=Path, dir_okay=False), metavar="CASE",
              help="Write the case here (YAML, or JSON for .json) instead of stdout.")
@click.option("--title", default="", help="What was observed, in a line.")
@click.option("--run", "runs", multiple=True, metavar="NAME:FILE[,FILE...]",
              help="Artifacts of one configuration; two or more become runs compared on the settings they state (repeatable).")
def case_from(files: tuple[str, ...], output: Path | None, title: str, runs: tuple[str, ...]) -> None:
    """Recognise each FILE by its content, read it, and merge everything into one case."""
    from diagnoser.artifacts.build import case_from as build
    from diagnoser.fileio import check_outputs
    from diagnoser.probes.to_case import case_text, write_case

    named = [parse_run(r) for r in runs]
    if not files and not named:
        raise InputError("case from: give the artifacts to read (a benchmark result, a server log, a scrape, ...)")
    if len(named) == 1:
        raise InputError("--run: give two or more runs to compare, or the files without --run")
    check_outputs([("-o", output)], [*files, *(f for _, paths in named for f in paths)])
    found, imported = build(files, title=title, runs=named)
    report_import(imported, "case")
    comments = [f"built by diagnoser case from {', '.join(f for f, _ in imported.formats)}",
                *(f"disagree: {line}" for line in imported.disagreements())]
    if output is None:
        click.echo(case_text(found, comments=comments), nl=False)
        return
    write_case(output, found, comments)
    click.echo(f"case: wrote the case to {output} (diagnoser diagnose {output} ranks its causes)", err=True)


@case.command("formats")
def case_formats() -> None:
    """List the artifact formats `case from` recognises, in the order it tries them."""
    from diagnoser.artifacts.formats import formats

    for found in formats():
        click.echo(f"{found.name:24} {found.what}")
