"""``diagnoser rules``: list, show and test the rules (bundled, --rules files, plug-ins)."""

from __future__ import annotations

import click

from diagnoser.errors import EXIT_FIXTURES_FAILED, InputError, nearest

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
    rule_id = book.resolve(rule_id)
    if rule_id not in book.specs:
        raise InputError(f"no rule {rule_id!r}; `diagnoser rules list` shows the ids")
    # the loader has checked that the declared thresholds are exactly the ones the rule reads
    doc = {"defined_in": book.origin[rule_id], **book.specs[rule_id].model_dump(mode="json")}
    click.echo(yaml.safe_dump(doc, sort_keys=False, width=100).rstrip())


@rules.command("facts")
@click.argument("fact", required=False, metavar="[FACT]")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def facts_cmd(fact: str | None, as_json: bool) -> None:
    """The fields every fact class carries, with unit and meaning: what a pattern may name."""
    import json

    from diagnoser.engine.fact_fields import fact_table

    table = {cls.__name__: fields for cls, fields in fact_table().items()}
    if fact is not None:
        if fact not in table:
            hint = nearest(fact, sorted(table))
            raise InputError(f"no fact {fact!r}" + (f" (nearest: {hint})" if hint else "") + "; `diagnoser rules facts` lists them")
        table = {fact: table[fact]}
    if as_json:
        doc = {name: [{"field": i.name, "unit": i.unit, "meaning": i.meaning, "derived": i.derived} for i in fields.values()]
               for name, fields in table.items()}
        click.echo(json.dumps(doc, indent=2))
        return
    for name, fields in table.items():
        click.echo(name)
        for info in fields.values():
            unit = f" [{info.unit}]" if info.unit else ""
            derived = " (derived)" if info.derived else ""
            click.echo(f"  {info.name}{unit}{derived}: {info.meaning}")


@rules.command("explain")
@click.argument("args", nargs=-1, metavar="ID CASE | --all CASE")
@click.option("--all", "every", is_flag=True, help="One line per rule: its verdict and the first condition that failed.")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON.")
@click.option("--threshold", "thresholds", multiple=True, metavar="RULE.NAME=VALUE|MODULE.NAME=VALUE", help="Change a rule threshold for this run (repeatable).")
@_RULES_OPTION
def explain_cmd(args: tuple[str, ...], every: bool, as_json: bool, thresholds: tuple[str, ...], rule_paths: tuple[str, ...]) -> None:
    """Why rule ID concluded or stayed silent on CASE, condition by condition."""
    from diagnoser.engine import load_rulebook
    from diagnoser.engine.explain import explain_rules
    from diagnoser.models.case import load_case
    from diagnoser.report.explain import render_explanation, render_overview

    if len(args) != (1 if every else 2):
        raise InputError("usage: diagnoser rules explain ID CASE, or diagnoser rules explain --all CASE")
    from diagnoser.engine.thresholds import parse_threshold, thresholds_set

    settings = dict(parse_threshold(t) for t in thresholds)
    book = load_rulebook(rule_paths)
    rule_ids = sorted(book.specs, key=lambda r: (book.specs[r].kind.value, r)) if every else [args[0]]
    case = load_case(args[-1])
    with thresholds_set(book, settings):
        explanations = explain_rules(case, book, rule_ids)
    if as_json:
        click.echo("[" + ",".join(x.model_dump_json(indent=2) for x in explanations) + "]" if every else explanations[0].model_dump_json(indent=2))
    else:
        click.echo(render_overview(explanations) if every else render_explanation(explanations[0]), nl=False)


@rules.command("new")
@click.argument("rule_id", metavar="ID")
@click.option("--dir", "folder", default=".", show_default=True, metavar="DIR", help="Folder to write ID.yaml and ID-fixtures.yaml in.")
def new_cmd(rule_id: str, folder: str) -> None:
    """Scaffold a YAML rule and its fixture pair (fires / near miss) that pass as written."""
    from pathlib import Path

    from diagnoser.engine import load_rulebook
    from diagnoser.engine.scaffold import scaffold

    rules_file, fixtures = scaffold(rule_id, Path(folder), set(load_rulebook().specs))
    click.echo(f"wrote {rules_file} and {fixtures}")
    click.echo(f"run: diagnoser rules test {fixtures} --rules {rules_file}")


@rules.command("test")
@click.argument("path", required=False, metavar="[PATH]")
@_RULES_OPTION
@click.option("--coverage", "show_coverage", is_flag=True, help="Also list rules no fixture fires, rules without a near miss, and thresholds no near miss tests.")
@click.pass_context
def test_cmd(ctx: click.Context, path: str | None, rule_paths: tuple[str, ...], show_coverage: bool) -> None:
    """Run fixtures in PATH (file or folder; default: the bundled ones and every installed pack's). Exit 3 if any fails."""
    from pathlib import Path

    from diagnoser.engine import load_rulebook
    from diagnoser.engine.fixtures import bundled_fixtures, diagnosed_fixtures, run_fixtures

    book = load_rulebook(rule_paths)
    folder = Path(path) if path else bundled_fixtures()
    diagnosed = diagnosed_fixtures(folder, book)
    results = run_fixtures(diagnosed)
    if path is None:  # the bundled fixtures and those of every installed rule pack
        for pack in book.pack_fixtures:
            results += run_fixtures(diagnosed_fixtures(pack, book))
    for r in results:
        click.echo(f"{'ok  ' if r.ok else 'FAIL'} {Path(r.file).name}: {r.name}")
        for problem in r.problems:
            click.echo(f"       {problem}")
    failed = sum(not r.ok for r in results)
    own = _own_rules(book, rule_paths)
    if own and path is not None:
        from diagnoser.engine.twins import twins

        for rule, same in twins(diagnosed, own).items():
            click.echo(
                f"hint: {rule} claims the same time as {', '.join(same)} wherever it fires and is silent where they are: "
                f"a duplicate? `diagnoser rules show {same[0]}`"
            )
    if show_coverage:
        from diagnoser.engine.coverage import coverage

        # with --rules, the coverage of those rules: a pack author's own, not the bundled ones
        report = coverage(diagnosed, book, own or None)
        for label, ids in (
            ("no fixture fires", report.never_fired),
            ("no near-miss fixture (silent:)", report.no_near_miss),
            ("thresholds no near miss tests", report.thresholds_untested),
        ):
            click.echo(f"coverage: {label}: {len(ids)} of {len(report.rules)} rules" + (f": {', '.join(ids)}" if ids else ""))
    click.echo(f"{len(results) - failed} passed, {failed} failed")
    if failed:
        ctx.exit(EXIT_FIXTURES_FAILED)


def _own_rules(book, rule_paths: tuple[str, ...]) -> set[str]:
    """The rules loaded from ``--rules`` files: an author's own, not the bundled ones."""
    from diagnoser.engine.loader import rule_files

    extra = {str(p) for p in rule_files(rule_paths)}
    return {r for r, where in book.origin.items() if where in extra}
