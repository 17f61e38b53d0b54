"""`diagnoser schema NAME`: the JSON Schema of a document diagnoser reads or writes."""

from __future__ import annotations

import importlib
import json

import click

# document name -> "module:Model"
DOCUMENTS = {
    "workload": "diagnoser.models.workload:Workload",
    "case": "diagnoser.models.case:Case",
    "bound": "diagnoser.bound.estimate:BoundReport",
    "probe": "diagnoser.models.probe_report:ProbeReport",
    "diagnosis": "diagnoser.models.hypothesis:Diagnosis",
    "walkthrough": "diagnoser.walkthroughs.model:Walkthrough",
}


@click.command()
@click.argument("name", type=click.Choice(sorted(DOCUMENTS)))
def schema(name: str) -> None:
    """Print the JSON Schema of NAME, for editors and for scripts that produce inputs. The case's
    ``x-field-roles`` says of each field whether the rules read it, it feeds a canonical fact, or it is informational."""
    module_name, attr = DOCUMENTS[name].split(":")
    model = getattr(importlib.import_module(module_name), attr)
    document = model.model_json_schema()
    if name == "case":
        from diagnoser.engine.field_roles import roles

        document["x-field-roles"] = roles(model)
    click.echo(json.dumps(document, indent=2))
