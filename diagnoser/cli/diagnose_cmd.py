"""``diagnoser diagnose CASE|FILE...``: run the rule base over a case, or over the case that
artifacts (benchmark results, logs, scrapes; see ``case from``) make, and print ranked hypotheses."""

from __future__ import annotations

import click

from diagnoser.errors import InputError


@click.command("diagnose")
@click.argument("inputs", nargs=-1, required=True, metavar="CASE|FILE...")
@click.option("--json", "as_json", is_flag=True, help="Print the diagnosis as JSON.")
@click.option("--markdown", is_flag=True, help="Print the diagnosis as Markdown.")
@click.option("--html", is_flag=True, help="Print the diagnosis as one self-contained HTML page.")
@click.option("--rules", "rule_paths", multiple=True, metavar="PATH", help="Extra rule file or folder (repeatable).")
@click.option(
    "--threshold", "thresholds", multiple=True, metavar="RULE.NAME=VALUE|MODULE.NAME=VALUE",
    help="Change a rule threshold for this run, e.g. launch.MIN_PART_SHARE=0.05 (repeatable; `rules show ID` lists them).",
)
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE instead of stdout.")
def diagnose(
    inputs: tuple[str, ...], as_json: bool, markdown: bool, html: bool, rule_paths: tuple[str, ...], thresholds: tuple[str, ...], output: str | None
) -> None:
    """Rank hypotheses for CASE (JSON/YAML case file) or for the case FILE... make (benchmark results, logs,
    metrics scrapes, command lines, nvidia-smi; a case file among them is the base they add to), with checks,
    bounded gains and undo criteria."""
    from diagnoser.engine import diagnose as run_diagnosis
    from diagnoser.engine import load_rulebook
    from diagnoser.fileio import write_atomic
    from diagnoser.artifacts.build import load_inputs
    from diagnoser.report import render_html, render_json, render_markdown, render_text

    chosen = [flag for flag, on in (("--json", as_json), ("--markdown", markdown), ("--html", html)) if on]
    if len(chosen) > 1:
        raise InputError(f"{' and '.join(chosen)}: choose one output format")
    from diagnoser.engine.thresholds import parse_threshold, thresholds_set
    from diagnoser.fileio import check_outputs

    check_outputs([("-o", output)], [*inputs, *rule_paths])
    settings = dict(parse_threshold(t) for t in thresholds)
    case, imported = load_inputs(inputs)
    if imported is not None:
        from diagnoser.cli.case_cmd import report_import

        report_import(imported, "diagnose")
    case_path = inputs[0] if len(inputs) == 1 else "the artifacts"
    rulebook = load_rulebook(rule_paths)
    with thresholds_set(rulebook, settings) as before:
        try:
            result = run_diagnosis(case, rulebook)
        except InputError as err:  # the bound rejected the pinned workload
            raise InputError(f"{case_path}: workload: {err}") from None
    result.thresholds_changed = {key: [before[key], value] for key, value in settings.items()}
    render = render_json if as_json else render_markdown if markdown else render_text
    if html:
        from diagnoser.chart_inputs import chart_inputs

        text = render_html(result, charts=chart_inputs(case))
    else:
        text = render(result)
    if output:
        write_atomic(output, text if text.endswith("\n") else text + "\n")
    else:
        click.echo(text)
