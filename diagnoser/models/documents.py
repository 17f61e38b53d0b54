"""Reading the documents users hand us (workloads, cases, probe reports, rule specs).

Every failure becomes one ``InputError`` line naming the file and the first bad field, so the
CLI never shows a traceback for a typo.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from diagnoser.errors import InputError

M = TypeVar("M", bound=BaseModel)


def validation_message(err: ValidationError, where: str) -> str:
    """One line naming the first bad field, for the CLI."""
    first = err.errors()[0]
    # a key is the document's own text: a newline or escape in it must not break the one line
    loc = ".".join(str(part) if str(part).isprintable() else repr(str(part)) for part in first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    more = f" (+{len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"{where}: {loc}: {msg}{more}"


# A YAML document may share one node many times through anchors and aliases; validating it
# walks every use. Ten levels of ten aliases is 10^10 nodes from a few hundred bytes, so the
# expanded size is counted (each shared node once per use, cheaply) and capped.
MAX_EXPANDED_NODES = 2_000_000
# YAML parses far slower than JSON; no hand-written case or workload comes near this.
MAX_YAML_BYTES = 4 * 2**20


def _expanded_size(data: Any) -> int:
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, (dict, list)) or (id(node) in sizes and not children_done):
            continue
        children = list(node.values()) + list(node.keys()) if isinstance(node, dict) else node
        if children_done:
            sizes[id(node)] = 1 + sum(sizes.get(id(c), 1) for c in children)
            if sizes[id(node)] > MAX_EXPANDED_NODES:
                return sizes[id(node)]
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, (dict, list)) and id(c) not in sizes)
    return sizes.get(id(data), 1)


def load_document(path: str | Path, what: str = "a JSON or YAML document") -> Any:
    """Read a document with one-line errors for the usual failures.

    A ``.json`` file is read as JSON (so ``2.64e1`` is a number and ``NaN`` is refused), anything
    else as YAML. Both are capped in size, and YAML in nesting and alias expansion, so no file
    can make diagnoser read or walk without end.
    """
    import yaml  # local: only readers of YAML pay for it

    from diagnoser.jsondoc import read_json, read_text

    path = Path(path)
    if path.suffix.lower() == ".json":
        return read_json(path, what)
    text = read_text(path, what, MAX_YAML_BYTES)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader, libyaml's when built
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise InputError(f"{path}: not valid YAML{at}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be {what}") from None
    if _expanded_size(data) > MAX_EXPANDED_NODES:
        raise InputError(f"{path}: its aliases expand to more than {MAX_EXPANDED_NODES:,} nodes; write the values out")
    return data


def load_model(path: str | Path, model: type[M], what: str, version: int | tuple[int, ...] | None = None) -> M:
    """A mapping document validated as ``model``; ``version`` (the newest first) checks its ``schema_version`` first."""
    data = load_document(path, what)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected {what} (a mapping at the top level)")
    if version is not None:
        readable = (version,) if isinstance(version, int) else version
        found = data.get("schema_version", readable[0])
        if found not in readable:
            listed = ", ".join(str(v) for v in readable)
            raise InputError(f"{path}: {what}: schema_version {found} not supported (this diagnoser reads {listed})")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise InputError(validation_message(err, str(path))) from None
