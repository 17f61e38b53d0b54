"""Every diagnoser command a diagnosis suggests exists, with options the CLI accepts.

The commands are read from the JSON of every example, bundled fixture and development case
(checks, remedies, explanations, next questions) and parsed by the CLI's own click parser.
A suggestion may leave out an argument the reader must supply (``run `diagnoser analyze` on
a trace``); an unknown subcommand, option or extra argument fails.
"""

import re

import click
import pytest

from conftest import REPO
from diagnoser.cli import cli
from diagnoser.engine import diagnose, load_rulebook
from diagnoser.engine.fixtures import bundled_fixtures, fixture_files, load_fixtures
from diagnoser.models.case import load_case

SUGGESTED = re.compile(r"`(diagnoser [^`]+)`")


def _diagnoses():
    book = load_rulebook()
    cases = [load_case(p) for p in sorted((REPO / "examples").glob("case-*.yaml"))]
    cases += [load_case(p) for p in sorted((REPO / "tests" / "data" / "cases").glob("[DE][0-9][0-9].yaml"))]
    cases += [fx.case for f in fixture_files(bundled_fixtures()) for fx in load_fixtures(f)]
    return [diagnose(c, book) for c in cases]


def suggested_commands() -> set[str]:
    found = set()
    for d in _diagnoses():
        found.update(SUGGESTED.findall(d.model_dump_json()))
    return found


def parse(command: str) -> str:
    """The command's name after click has parsed every word of it; raises UsageError otherwise."""
    words = command.split()[1:]
    group, ctx = cli, cli.make_context("diagnoser", words)
    rest = [*ctx._protected_args, *ctx.args] if hasattr(ctx, "_protected_args") else list(ctx.args)
    while True:
        name, sub, rest = group.resolve_command(ctx, rest)
        try:
            ctx = sub.make_context(name, rest, parent=ctx)
        except click.MissingParameter:
            return name
        if not isinstance(sub, click.Group):
            return name
        group, rest = sub, [*getattr(ctx, "_protected_args", []), *ctx.args]


COMMANDS = sorted(suggested_commands())


def test_diagnoses_do_suggest_commands():
    assert any(c.startswith("diagnoser probe --only") for c in COMMANDS)
    assert any(c.startswith("diagnoser analyze") for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_suggested_command_parses(command):
    parse(command)


@pytest.mark.parametrize("command", ["diagnoser probe client", "diagnoser probe --gemm", "diagnoser prob"])
def test_the_parser_refuses_what_the_cli_refuses(command):
    with pytest.raises(click.UsageError):
        parse(command)
