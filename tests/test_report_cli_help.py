"""Help a newcomer reads first: every exit code, and group summaries that end where their sentence does."""

from __future__ import annotations

from conftest import run_cli


def test_top_help_lists_every_exit_code():
    out = " ".join(run_cli("--help").stdout.split())
    assert "0 success, 1 internal error, 2 bad input or usage, 3 `rules test` found a failing fixture" in out


def test_group_help_summaries_are_whole_sentences():
    from diagnoser.cli import cli, first_sentence

    import click

    for group in ("rules", "lab", "nsys", "whatif", "case", "walkthrough"):
        listed = run_cli(group, "--help").stdout.partition("Commands:")[2]
        assert not [line for line in listed.splitlines() if line.rstrip().endswith("...")], (group, listed)  # click's cut
        commands = "".join(listed.split())  # wrapping may break at a hyphen
        loaded = cli.get_command(click.Context(cli), group)
        for name, sub in getattr(loaded, "commands", {}).items():  # a plain command has no summaries to cut
            assert "".join(f"{name} {sub.short_help or first_sentence(sub.help)}".split()) in commands, (group, name)
