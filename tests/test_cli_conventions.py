"""One convention across the CLI: every option explained, reports to -o/--output, one name per thing."""

import click
import pytest

from diagnoser.cli import COMMANDS, cli


def _commands():
    ctx = click.Context(cli)
    stack = [(name, cli.get_command(ctx, name)) for name in COMMANDS]
    while stack:
        path, command = stack.pop()
        yield path, command
        if isinstance(command, click.Group):
            stack += [(f"{path} {name}", command.get_command(ctx, name)) for name in command.list_commands(ctx)]


ALL = sorted(_commands(), key=lambda item: item[0])


@pytest.mark.parametrize("path,command", ALL, ids=[p for p, _ in ALL])
def test_every_option_has_help_text(path, command):
    missing = [p.opts[0] for p in command.params if isinstance(p, click.Option) and not (p.help or "").strip()]
    assert not missing, f"diagnoser {path}: options without help: {missing}"


# Commands whose main product is a report: each can write it to a file with -o/--output.
REPORT_WRITERS = ["diagnose", "probe", "analyze", "bound", "nsys show", "nsys compare"]


@pytest.mark.parametrize("path", REPORT_WRITERS)
def test_report_writers_take_dash_o(path):
    command = dict(ALL)[path]
    names = {opt for p in command.params for opt in p.opts}
    assert {"-o", "--output"} <= names, f"diagnoser {path} lacks -o/--output"


def test_a_saved_probe_report_has_one_name():
    for path in ("bound", "probe"):
        names = {opt for p in dict(ALL)[path].params for opt in p.opts}
        assert "--probe-report" in names and "--from-report" not in names and "--probe" not in names
