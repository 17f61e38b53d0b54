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
    loc = ".".join(str(part) for part in first["loc"]) or "(top level)"
    msg = first["msg"].removeprefix("Value error, ")
    more = f" (+{len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"{where}: {loc}: {msg}{more}"


def load_document(path: str | Path) -> Any:
    """Read a JSON or YAML file, with one-line errors for the usual failures."""
    import yaml  # local: only readers of YAML pay for it

    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a file") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file") from None
    if not text.strip():
        raise InputError(f"{path}: file is empty")
    try:
        return yaml.safe_load(text)  # YAML is a superset of JSON
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise InputError(f"{path}: not valid JSON/YAML{at}") from None


def load_model(path: str | Path, model: type[M], what: str, version: int | tuple[int, ...] | None = None) -> M:
    """A mapping document validated as ``model``; ``version`` (the newest first) checks its ``schema_version`` first."""
    data = load_document(path)
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
