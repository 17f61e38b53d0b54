"""``diagnoser walkthrough``: scored walkthroughs, the interviewer's sheet, and their linter."""

from __future__ import annotations

import sys

import click

from diagnoser.errors import InputError


def _answers(path: str, steps: list[str]) -> dict[str, object]:
    """An answer file: a mapping of step id -> answer (text, number, or a list for an ordering)."""
    from diagnoser.models.documents import load_document

    data = load_document(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of step id -> answer")
    unknown = [str(k) for k in data if str(k) not in steps]
    if unknown:
        raise InputError(f"{path}: no step {unknown[0]!r} in this walkthrough (steps: {', '.join(steps)})")
    bad = [str(k) for k, v in data.items() if isinstance(v, dict)]
    if bad:
        raise InputError(f"{path}: {bad[0]}: an answer is text, a number or a list, not a mapping")
    return {str(k): v for k, v in data.items()}


def _lint(paths: tuple[str, ...]) -> None:
    from diagnoser.walkthroughs.lint import lint
    from diagnoser.walkthroughs.sources import default_rulebook

    if not paths:
        raise InputError("walkthrough lint: give a walkthrough file or folder")
    for prepared in lint(paths, default_rulebook()):
        click.echo(f"ok   {prepared.origin}: {prepared.doc.name} ({len(prepared.doc.steps)} steps)")


def _list(catalogue, as_json: bool) -> None:
    import json

    from diagnoser.walkthroughs.render import render_catalogue

    if as_json:
        rows = [
            {"name": n, "title": p.doc.title, "steps": len(p.doc.steps), "skills": list(p.doc.skills), "origin": p.origin}
            for n, p in sorted(catalogue.items())
        ]
        click.echo(json.dumps(rows, indent=2))
    else:
        click.echo(render_catalogue(catalogue))


def _interactive(run, as_json: bool) -> None:
    """One prompt per step on stdin; an empty line skips, an unreadable answer is asked again, end of input stops."""
    from diagnoser.walkthroughs.answers import Unreadable
    from diagnoser.walkthroughs.render import render_verdict, render_view

    stdin = sys.stdin
    while (view := run.view()) is not None:
        click.echo(render_view(view), err=as_json)
        while True:
            click.echo("answer> ", nl=False, err=as_json)
            line = stdin.readline()
            if not line or not stdin.isatty():  # a terminal echoes what is typed; show piped answers (and end the line at EOF)
                click.echo(line.rstrip("\n"), err=as_json)
            if not line:
                return
            try:
                if line.strip():
                    run.read(line.strip())
                break
            except Unreadable as err:
                click.echo(f"  cannot read that: {err}", err=as_json)
        click.echo(render_verdict(run.submit(line.strip())) + "\n", err=as_json)


def _scripted(run, answers: dict[str, object], as_json: bool) -> None:
    from diagnoser.walkthroughs.render import render_verdict, render_view

    while (view := run.view()) is not None:
        verdict = run.submit(answers.get(view.id))
        if not as_json:
            click.echo(render_view(view) + "\n" + render_verdict(verdict) + "\n")


@click.command("walkthrough")
@click.argument("words", nargs=-1, metavar="[NAME | lint PATH...]")
@click.option("--answers", "answers_path", metavar="FILE", help="Answer the steps from FILE (YAML/JSON: step id -> answer), not stdin.")
@click.option("--json", "as_json", is_flag=True, help="Print the scored result (or the sheet, or the list) as JSON.")
@click.option("--interviewer", is_flag=True, help="Print the interviewer's sheet for NAME instead of running it.")
@click.option("--walkthroughs", "extra", multiple=True, metavar="PATH", help="Extra walkthrough file or folder (repeatable).")
def walkthrough(words: tuple[str, ...], answers_path: str | None, as_json: bool, interviewer: bool, extra: tuple[str, ...]) -> None:
    """Guided, scored walkthroughs of the diagnosis.

    \b
    diagnoser walkthrough                          list the walkthroughs
    diagnoser walkthrough NAME                     answer on stdin, one prompt per step
    diagnoser walkthrough NAME --answers FILE      answer from a file (classes, tests)
    diagnoser walkthrough --interviewer NAME       questions, answers, wrong answers, follow-ups
    diagnoser walkthrough lint PATH...             check walkthrough files (exit 2 on the first problem)

    A scored run exits 0 whatever the score; 2 means bad input (a bad walkthrough or answer file).
    """
    if words[:1] == ("lint",):
        if answers_path or interviewer or extra or as_json:
            raise InputError("walkthrough lint takes only paths")
        _lint(words[1:])
        return
    if len(words) > 1:
        raise InputError(f"walkthrough: one NAME at a time (got {' '.join(words)})")
    from diagnoser.walkthroughs import WalkthroughRun, find, interviewer_sheet, load_catalogue
    from diagnoser.walkthroughs.render import render_intro, render_result, render_sheet

    catalogue = load_catalogue(extra)
    if not words:
        if answers_path or interviewer:
            raise InputError("walkthrough: name the walkthrough (`diagnoser walkthrough` lists them)")
        _list(catalogue, as_json)
        return
    prepared = find(catalogue, words[0])
    if interviewer:
        if answers_path:
            raise InputError("walkthrough: --interviewer prints the sheet; it takes no --answers")
        sheet = interviewer_sheet(prepared)
        click.echo(sheet.model_dump_json(indent=2) if as_json else render_sheet(sheet))
        return
    answers = _answers(answers_path, [s.id for s in prepared.doc.steps]) if answers_path else None
    run = WalkthroughRun(prepared)
    if answers is None:
        click.echo(render_intro(prepared), err=as_json)
        _interactive(run, as_json)
    else:
        if not as_json:
            click.echo(render_intro(prepared))
        _scripted(run, answers, as_json)
    result = run.result()
    click.echo(result.model_dump_json(indent=2) if as_json else render_result(result))
