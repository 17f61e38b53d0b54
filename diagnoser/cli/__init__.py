"""The ``diagnoser`` command line.

Subcommands live in their own modules and are imported only when invoked, so
``diagnoser --help`` stays fast and never pulls in torch, textual or numpy. The table below
is the single place that names them; its short help is shown by ``--help`` without importing.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys

import click

from diagnoser import __version__
from diagnoser.errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK, DiagnoserError

# name -> ("module:attribute", short help shown by --help)
COMMANDS: dict[str, tuple[str, str]] = {
    "bound": ("diagnoser.cli.bound_cmd:bound", "Per-rank decode bound for a pinned workload."),
    "probe": ("diagnoser.cli.probe_cmd:probe", "Measure device, bandwidth, kernels, graphs, collectives, client gaps."),
    "analyze": ("diagnoser.cli.analyze_cmd:analyze", "Turn profiler traces into a per-step critical-path budget."),
    "diagnose": ("diagnoser.cli.diagnose_cmd:diagnose", "Run the rule base over a case file or artifacts and rank hypotheses."),
    "case": ("diagnoser.cli.case_cmd:case", "Build a case from benchmark results, logs, scrapes, command lines, nvidia-smi."),
    "live": ("diagnoser.cli.live_cmd:live", "Measure a running server (discover, load, profile) and diagnose it."),
    "whatif": ("diagnoser.cli.whatif_cmd:whatif", "Amdahl, speculation and batching calculators."),
    "tui": ("diagnoser.cli.tui_cmd:tui", "The guided session: from the pin to a decision, in the terminal."),
    "rules": ("diagnoser.cli.rules_cmd:rules", "List, show and test the rules."),
    "nsys": ("diagnoser.cli.nsys_cmd:nsys", "Drive Nsight Systems: profile, export, recipes."),
    "schema": ("diagnoser.cli.schema_cmd:schema", "Print the JSON Schema of an input or output document."),
    "walkthrough": ("diagnoser.cli.walkthrough_cmd:walkthrough", "Scored interview and training walkthroughs; interviewer sheets."),
    "lab": ("diagnoser.cli.lab_cmd:lab", "A small decode server with injectable faults, to diagnose end to end."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        target, _ = COMMANDS[name]
        module_name, attr = target.split(":")
        command = getattr(importlib.import_module(module_name), attr)
        if isinstance(command, click.Group):
            for sub in command.commands.values():
                if sub.short_help is None and sub.help:
                    sub.short_help = first_sentence(sub.help)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def first_sentence(help_text: str) -> str:
    """A command's first sentence, whole: click's default summary cuts it at 45 characters, mid-word."""
    paragraph = " ".join(inspect.cleandoc(help_text).split("\n\n")[0].split())
    head, dot, _ = paragraph.partition(". ")
    return head + "." if dot else paragraph


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="diagnoser")
def cli() -> None:
    """Find out why a decode loop is slower than its bound.

    Exit codes: 0 success, 1 internal error, 2 bad input or usage, 3 `rules test` found a failing fixture.
    Set DIAGNOSER_DEBUG=1 to see a traceback for internal errors.
    """


def _tolerate_narrow_encodings() -> None:
    """Under ``PYTHONIOENCODING=ascii`` or a C locale a report's µs or a kernel's name cannot be
    encoded; print a replacement character rather than fail after the work is done."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure") and (stream.encoding or "").lower().replace("-", "") != "utf8":
            stream.reconfigure(errors="replace")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI, turning every failure into one line on stderr and an exit code."""
    _tolerate_narrow_encodings()
    try:
        result = cli.main(args=argv, prog_name="diagnoser", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("diagnoser: aborted", err=True)
        return EXIT_INPUT
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.UsageError as err:
        # click prints usage, a hint and the error on three lines; one line says it all
        command = err.ctx.command_path if err.ctx is not None else "diagnoser"
        click.echo(f"{command}: error: {err.format_message()} (see {command} --help)", err=True)
        return EXIT_INPUT
    except click.ClickException as err:
        click.echo(f"diagnoser: error: {err.format_message()}", err=True)
        return EXIT_INPUT
    except DiagnoserError as err:
        from diagnoser.report.untrusted import plain  # here: importing diagnoser.report costs --help pydantic

        click.echo(f"diagnoser: error: {plain(err)}", err=True)  # may quote a server or a file
        return err.exit_code
    except KeyboardInterrupt:
        click.echo("diagnoser: interrupted", err=True)
        return 130
    except Exception as err:  # noqa: BLE001 - the last line of defence before a traceback
        if os.environ.get("DIAGNOSER_DEBUG"):
            raise
        click.echo(
            f"diagnoser: internal error: {type(err).__name__}: {err} (set DIAGNOSER_DEBUG=1 for a traceback)",
            err=True,
        )
        return EXIT_INTERNAL
    # In non-standalone mode click returns ctx.exit(code)'s code, or the command's own value.
    return result if isinstance(result, int) else EXIT_OK


def run() -> None:
    sys.exit(main())
