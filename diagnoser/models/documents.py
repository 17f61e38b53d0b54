"""Reading the documents users hand us (workloads, cases, probe reports, rule specs).

Every failure becomes one ``InputError`` line naming the file and the first bad field, so the
CLI never shows a traceback for a typo.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from diagnoser.errors import InputError, nearest

M = TypeVar("M", bound=BaseModel)


def validation_message(err: ValidationError, where: str, model: type[BaseModel] | None = None) -> str:
    """One line naming the first bad field, for the CLI.

    A value that fits none of a union's forms fails once per form; those failures are one
    problem and are said together. With ``model``, a key that is not a field gets the nearest
    field's name, as the rule loader does.
    """
    errors = err.errors()
    first = errors[0]
    together = _union_alternatives(errors)
    # a key is the document's own text: a newline or escape in it must not break the one line
    loc_parts = first["loc"][:-1] if len(together) > 1 else first["loc"]
    loc = ".".join(str(part) if str(part).isprintable() else repr(str(part)) for part in loc_parts) or "(top level)"
    msg = ", or ".join(
        e["msg"].removeprefix("Value error, ") if i == 0 else e["msg"].removeprefix("Input should be ")
        for i, e in enumerate(together)
    )
    if first["type"] == "extra_forbidden" and model is not None:
        known = _field_names(model, first["loc"][:-1])
        guess = nearest(str(first["loc"][-1]), known)
        msg = f"not a field here; did you mean {guess!r}?" if guess else f"not a field here (fields: {', '.join(known)})"
    if first["type"] == "missing":
        misspelt = _misspelling_of(first["loc"], errors)
        if misspelt is not None:
            msg += f" (is {misspelt!r}, given beside it, a misspelling?)"
            together = [*together, next(e for e in errors if e["loc"] == (*first["loc"][:-1], misspelt))]
    more = f" (+{len(errors) - len(together)} more)" if len(errors) > len(together) else ""
    return f"{where}: {loc}: {msg}{more}"


def _union_alternatives(errors: list) -> list:
    """The first error and those that are the same value failing another form of one union: same
    place but the last part (the form's tag), same input, each failing in a different way."""
    first = errors[0]
    same = [
        e for e in errors
        if e["loc"] and len(e["loc"]) == len(first["loc"]) and e["loc"][:-1] == first["loc"][:-1] and e.get("input") is first.get("input")
        and isinstance(e["loc"][-1], str) and e["type"] != "extra_forbidden"
    ]
    # the forms of one union fail each in its own way; several fields failing alike are several problems
    distinct = len({e["type"] for e in same}) == len(same)
    return same if len(same) > 1 and first in same and distinct else [first]


def _misspelling_of(loc: tuple, errors: list) -> str | None:
    """A key refused as extra beside a missing required field, close enough to be its misspelling."""
    extras = [str(e["loc"][-1]) for e in errors if e["type"] == "extra_forbidden" and e["loc"][:-1] == loc[:-1]]
    return nearest(str(loc[-1]), extras)


def _field_names(model: type[BaseModel], loc: tuple) -> list[str]:
    """The fields of the model found at ``loc`` inside ``model`` (list indexes and union forms
    followed to the first model that has the next key); empty when the place is not a model."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        current = _model_in(fields[part].annotation)
        if current is None:
            return []
    return sorted(getattr(current, "model_fields", {}))


def _model_in(annotation: Any) -> type[BaseModel] | None:
    return next((k for k in plain_types(annotation)[1] if isinstance(k, type) and issubclass(k, BaseModel)), None)


def plain_types(annotation: Any) -> tuple[bool, list]:
    """The plain types a field holds, in the order declared (Optional, unions, Annotated and
    Literal unwrapped), and whether it holds them in a list: what a field means to a reader."""
    listed, kinds, todo = False, [], [annotation]
    while todo:
        a = todo.pop(0)
        origin = typing.get_origin(a)
        if origin in (list, tuple, set, frozenset):
            listed = True
            todo += typing.get_args(a)
        elif origin is typing.Annotated:
            todo.append(typing.get_args(a)[0])
        elif origin is typing.Literal:
            kinds += [type(x) for x in typing.get_args(a) if type(x) not in kinds]
        elif origin is not None:
            todo += typing.get_args(a)
        elif a is not type(None) and a not in kinds:
            kinds.append(a)
    return listed, kinds


# A YAML document may share one node many times through anchors and aliases, and an alias inside
# its own anchor (``&a [*a]``) makes a cycle; validating walks every use. Ten levels of ten
# aliases is 10^10 nodes from a few hundred bytes, so the expanded size is counted (each shared
# node once per use, cheaply), cycles are refused and nesting is capped before anything walks it.
MAX_EXPANDED_NODES = 2_000_000
MAX_DEPTH = 100  # no hand-written document nests past a dozen levels; recursive walkers stop near 1,000
# YAML parses far slower than JSON; no hand-written case or workload comes near this.
MAX_YAML_BYTES = 4 * 2**20


def shape_problem(data: Any) -> str | None:
    """Why ``data`` cannot be walked safely (a cycle, too deep, too large once aliases expand), or None.

    One iterative pass: a node on the current path seen again is a cycle; a finished node's
    expanded size is memoised so shared subtrees cost one visit.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        if children_done:
            on_path.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes.get(id(c), 1) for c in children)
            if sizes[id(node)] > MAX_EXPANDED_NODES:
                return f"its aliases expand to more than {MAX_EXPANDED_NODES:,} nodes; write the values out"
            continue
        if id(node) in sizes:
            continue
        if id(node) in on_path:
            return "an alias refers to a node that contains it (a cycle); write the values out"
        on_path.add(id(node))
        if len(on_path) > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep"
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, (dict, list)))
    return None


def parse_yaml(text: str, where: str, what: str = "a YAML document") -> Any:
    """YAML text as data, or one ``InputError`` line: the only way diagnoser reads YAML.

    Safe loader (libyaml's when built), size cap, and the shape check above, so no document,
    file or flag value can hang, exhaust memory or overflow the stack of whatever walks it.
    """
    import yaml  # local: only readers of YAML pay for it

    if len(text) > MAX_YAML_BYTES:
        raise InputError(f"{where}: larger than {MAX_YAML_BYTES:,} bytes, too big for {what}")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader, libyaml's when built
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise NotYaml(f"{where}: not valid YAML{at}") from None
    except (RecursionError, MemoryError):
        raise InputError(f"{where}: nested too deeply to be {what}") from None
    except ValueError as err:  # e.g. an integer past Python's digit limit
        raise InputError(f"{where}: not valid YAML: {' '.join(str(err).split())[:120]}") from None
    check_shape(data, where)
    return data


class NotYaml(InputError):
    """The text is not YAML at all; readers that sniff formats (artifacts, typed answers) fall back on it."""


def check_shape(data: Any, where: str) -> None:
    problem = shape_problem(data)
    if problem:
        raise InputError(f"{where}: {problem}")


def load_document(path: str | Path, what: str = "a JSON or YAML document") -> Any:
    """Read a document with one-line errors for the usual failures.

    A ``.json`` file is read as JSON (so ``2.64e1`` is a number and ``NaN`` is refused), anything
    else as YAML (through ``parse_yaml``). Both are capped in size and nesting, so no file can
    make diagnoser read or walk without end.
    """
    from diagnoser.jsondoc import read_json, read_text

    path = Path(path)
    if path.suffix.lower() == ".json":
        return read_json(path, what)  # JSON has no aliases, and its parser caps nesting
    return parse_yaml(read_text(path, what, MAX_YAML_BYTES), str(path), what)


def check_version(data: dict, where: str, version: int | tuple[int, ...]) -> None:
    """``data``'s ``schema_version`` (absent: the newest) must be one this diagnoser reads; ``true``
    is not 1, though Python compares them equal."""
    readable = (version,) if isinstance(version, int) else version
    found = data.get("schema_version", readable[0])
    if isinstance(found, bool) or found not in readable:
        listed = ", ".join(str(v) for v in readable)
        raise InputError(f"{where}: schema_version {str(found)[:40]} not supported (this diagnoser reads {listed})")


def load_model(path: str | Path, model: type[M], what: str, version: int | tuple[int, ...] | None = None) -> M:
    """A mapping document validated as ``model``; ``version`` (the newest first) checks its ``schema_version`` first."""
    data = load_document(path, what)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected {what} (a mapping at the top level)")
    if version is not None:
        check_version(data, f"{path}: {what}", version)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise InputError(validation_message(err, str(path), model)) from None
