"""``diagnoser tui [CASE | SESSION]``: the guided session, from the pin to a decision.

In a terminal it opens the Textual interface; when stdout is not a terminal it prints the
text diagnosis ``diagnoser diagnose`` prints, so a script or CI job that runs it is unaffected.
A CASE starts a new session saved beside it (``NAME.session.json``, never over an earlier
one); a SESSION resumes where it was left and keeps saving to itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click


def free_session_path(case: Path) -> Path:
    """NAME.session.json beside the case, or NAME.session-2.json, ... when earlier ones exist."""
    stem = case.name.removesuffix(case.suffix) if case.suffix else case.name
    candidate = case.with_name(f"{stem}.session.json")
    n = 2
    while candidate.exists():
        candidate = case.with_name(f"{stem}.session-{n}.json")
        n += 1
    return candidate


def open_workspace(source: str | None, session_out: str | None):
    """The workspace for SOURCE (a case or a saved session), the inputs it read, and the stage to open on."""
    from diagnoser.models.case import Case, load_case
    from diagnoser.models.session import Session, Source, SourceKind, load_session, looks_like_session
    from diagnoser.session_ops import merge_case
    from diagnoser.tui.workspace import Workspace

    if source is not None and looks_like_session(source):
        path = Path(session_out or source)
        inputs = [source] if path != Path(source) else []
        return Workspace(load_session(source), path, inputs=tuple(map(Path, inputs))), inputs, "hypotheses"
    if source is None:
        return Workspace(Session(), Path(session_out or "diagnoser.session.json")), [], "pin"
    case = load_case(source)
    session = Session(case=case, sources=[Source(kind=SourceKind.case, label=Path(source).name, sections=merge_case(Case(), case)[1])])
    path = Path(session_out) if session_out else free_session_path(Path(source))
    return Workspace(session, path, inputs=(Path(source),)), [source], "pin" if case.workload is None else "bound"


@click.command("tui")
@click.argument("source", required=False, metavar="[CASE | SESSION]")
@click.option("--session", "session_out", metavar="FILE", help="save the session here (default: beside the case, NAME.session.json)")
@click.option("--walkthrough", "walkthrough", metavar="NAME", help="open on the Walkthrough screen, running NAME (`diagnoser walkthrough` lists them)")
def tui(source: str | None, session_out: str | None, walkthrough: str | None) -> None:
    """Walk a case from the pin to a decision: bound, evidence, questions, hypotheses, what-if, report.

    Opens on CASE (a case file) or resumes SESSION (a file this command saved); every change
    is saved to the session at once. Without a terminal on stdout, prints the text diagnosis.
    In a terminal, --walkthrough NAME opens on that scored walkthrough (its progress is not saved).
    """
    workspace, inputs, start = open_workspace(source, session_out)
    if walkthrough is not None:
        from diagnoser.walkthroughs import find, load_catalogue

        find(load_catalogue(book=workspace.rulebook), walkthrough)  # a typo is bad input, in a terminal or not
    if not sys.stdout.isatty():
        from diagnoser.report import render_text

        click.echo(render_text(workspace.diagnosis))
        return
    from diagnoser.fileio import check_outputs

    check_outputs([("--session", workspace.path)], inputs)
    from diagnoser.tui.app import DiagnoserApp

    DiagnoserApp(workspace, start=start, walkthrough=walkthrough).run()
