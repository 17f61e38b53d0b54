"""``diagnoser rules``: list, show and test the rules (bundled, --rules files, plug-ins)."""

from __future__ import annotations

import click

from diagnoser.errors import InputError

_RULES_OPTION = click.option("--rules", "rule_paths", multiple=True, metavar="PATH", help="Extra rule file or folder (repeatable).")


@click.group("rules")
def rules() -> None:
    """Inspect and test the rule base."""


@rules.command("list")
@_RULES_OPTION
def list_cmd(rule_paths: tuple[str, ...]) -> None:
    """One line per rule: id, kind, parent, title."""
    from diagnoser.engine import load_rulebook

    book = load_rulebook(rule_paths)
    for spec in sorted(book.specs.values(), key=lambda s: (s.kind.value, s.id)):
        parent = f" <- {spec.parent}" if spec.parent else ""
        click.echo(f"{spec.id:34} {spec.kind.value:7} {spec.title}{parent}")


@rules.command("show")
@click.argument("rule_id", metavar="ID")
@_RULES_OPTION
def show_cmd(rule_id: str, rule_paths: tuple[str, ...]) -> None:
    """Everything a reviewer needs about one rule, as YAML."""
    import yaml

    from diagnoser.engine import load_rulebook

    book = load_rulebook(rule_paths)
    if rule_id not in book.specs:
        raise InputError(f"no rule {rule_id!r}; `diagnoser rules list` shows the ids")
    from diagnoser.engine.explain import rule_thresholds

    doc = {"defined_in": book.origin[rule_id], **book.specs[rule_id].model_dump(mode="json")}
    thresholds = rule_thresholds(book, rule_id)
    if thresholds:
        doc["thresholds"] = thresholds
    click.echo(yaml.safe_dump(doc, sort_keys=False, width=100).rstrip())


@rules.command("explain")
@click.argument("rule_id", metavar="ID")
@click.argument("case_path", metavar="CASE")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@_RULES_OPTION
def explain_cmd(rule_id: str, case_path: str, as_json: bool, rule_paths: tuple[str, ...]) -> None:
    """Why rule ID concluded or stayed silent on CASE, condition by condition."""
    from diagnoser.engine import load_rulebook
    from diagnoser.engine.explain import explain_rules
    from diagnoser.models.case import load_case
    from diagnoser.report.explain import render_explanation

    (explanation,) = explain_rules(load_case(case_path), load_rulebook(rule_paths), [rule_id])
    click.echo(explanation.model_dump_json(indent=2) if as_json else render_explanation(explanation), nl=as_json)


@rules.command("test")
@click.argument("path", required=False, metavar="[PATH]")
@_RULES_OPTION
@click.pass_context
def test_cmd(ctx: click.Context, path: str | None, rule_paths: tuple[str, ...]) -> None:
    """Run fixtures in PATH (file or folder; default: the bundled fixtures). Exit 1 if any fails."""
    from pathlib import Path

    from diagnoser.engine import load_rulebook
    from diagnoser.engine.fixtures import bundled_fixtures, run_fixtures

    results = run_fixtures(Path(path) if path else bundled_fixtures(), load_rulebook(rule_paths))
    for r in results:
        click.echo(f"{'ok  ' if r.ok else 'FAIL'} {Path(r.file).name}: {r.name}")
        for problem in r.problems:
            click.echo(f"       {problem}")
    failed = sum(not r.ok for r in results)
    click.echo(f"{len(results) - failed} passed, {failed} failed")
    if failed:
        ctx.exit(1)
