"""What a form asks for, read from the pydantic models, and how typed text becomes a value.

A question names a case input; its model says which fields it has, which are a choice (a
flag, an enum) and which take typed text. Text is read as YAML, as ``--option`` values are,
so ``16``, ``[1, 2, 4]`` and ``nvlink`` arrive typed; pydantic then judges them. Nothing here
imports Textual, and nothing here computes a figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from diagnoser.errors import InputError
from diagnoser.models.documents import NotYaml, parse_yaml

from diagnoser.session_ops import alternatives, answer_annotation, model_of

Kind = Literal["text", "flag", "choice"]


@dataclass(frozen=True)
class FieldSpec:
    key: str
    help: str
    kind: Kind = "text"
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class AnswerForm:
    """Fields to fill for a section or one field; or, for a list input, a YAML document to write."""

    fields: tuple[FieldSpec, ...] = ()
    template: str | None = None


def field_spec(key: str, annotation: Any, help: str = "") -> FieldSpec:
    options = alternatives(annotation)
    if options == [bool]:
        return FieldSpec(key, help, "flag")
    enums = [a for a in options if isinstance(a, type) and issubclass(a, Enum)]
    if enums and len(options) == 1:
        return FieldSpec(key, help, "choice", tuple(e.value for e in enums[0]))
    return FieldSpec(key, help)


def model_fields(model: type[BaseModel], prefix: str = "") -> tuple[FieldSpec, ...]:
    return tuple(field_spec(prefix + name, f.annotation, f.description or "") for name, f in model.model_fields.items())


def _list_item(annotation: Any) -> type[BaseModel] | None:
    for option in alternatives(annotation):
        if get_origin(option) is list:
            return model_of(get_args(option)[0])
    return None


def answer_form(name: str) -> AnswerForm:
    """The form that answers the question for input ``name``."""
    annotation = answer_annotation(name)
    item = _list_item(annotation)
    if item is not None:
        required = [k for k, f in item.model_fields.items() if f.is_required()] or list(item.model_fields)[:3]
        row = ", ".join(f"{k}: " for k in required)
        return AnswerForm(template=f"# one entry per line; fields: {', '.join(item.model_fields)}\n- {{{row}}}\n")
    model = model_of(annotation)
    if model is not None:
        return AnswerForm(fields=model_fields(model))
    leaf = name.rpartition(".")[2]
    return AnswerForm(fields=(field_spec(leaf, annotation),))


def parse_text(text: str) -> Any:
    """Typed text as a value: YAML scalars and lists; text that is not YAML stays text; blank is None."""
    if not text.strip():
        return None
    try:
        return parse_document(text)
    except _NotYaml:
        return text


class _NotYaml(ValueError):
    pass


def parse_document(text: str) -> Any:
    """A YAML document typed into the answer box, through the one YAML reader (cycles, size and depth
    refused as in files); comments only read as nothing given. Problems are ``ValueError`` for the form."""
    try:
        return parse_yaml(text, "typed text")
    except NotYaml as err:
        raise _NotYaml(str(err).removeprefix("typed text: ")) from None
    except InputError as err:
        raise ValueError(str(err).removeprefix("typed text: ")) from None


def nested(values: dict[str, Any]) -> dict[str, Any]:
    """{'layout.tp': 2} -> {'layout': {'tp': 2}}, values of None left out."""
    doc: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        node = doc
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return doc


def error_for(key: str, errors: dict[str, str], keys: list[str]) -> str | None:
    """The message a field shows: its own, or one on a section whose first field it is."""
    if key in errors:
        return errors[key]
    for loc, msg in errors.items():
        if loc and key.startswith(loc + ".") and next(k for k in keys if k.startswith(loc + ".")) == key:
            return msg
    return None
