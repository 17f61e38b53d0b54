"""Where walkthroughs come from: the bundled scenarios, installed packs, and files or folders given.

Packs mirror rule packs: an entry point in the ``diagnoser.walkthroughs`` group names a
module; the YAML files in the folder it sets as ``WALKTHROUGHS`` (else the module's own
folder) are its walkthroughs. Every file is prepared when the catalogue loads, so a broken
one is refused with one line before anyone starts it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path
from typing import Iterable

from diagnoser.engine.loader import YAML_SUFFIXES, Rulebook, error_line
from diagnoser.errors import InputError, nearest
from diagnoser.walkthroughs.model import WALKTHROUGH_SCHEMA_VERSION, Walkthrough
from diagnoser.walkthroughs.prepare import Prepared, prepare

ENTRY_POINT_GROUP = "diagnoser.walkthroughs"
BUNDLED = Path(__file__).parent / "scenarios"


def walkthrough_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; folders give their YAML files (not their subfolders, which hold cases)."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in YAML_SUFFIXES and p.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"{path}: no such walkthrough file or folder")
    return files


def read_walkthrough(path: Path) -> Walkthrough:
    from diagnoser.models.documents import load_model

    return load_model(path, Walkthrough, "a walkthrough", version=WALKTHROUGH_SCHEMA_VERSION)


def _pack_folders() -> list[tuple[str, Path]]:
    found = []
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            module = ep.load()
        except Exception as err:  # noqa: BLE001 - any failure in a pack is bad input
            raise InputError(f"entry point {ep.name} ({ep.value}): cannot load walkthroughs: {error_line(err)}") from None
        folder = getattr(module, "WALKTHROUGHS", None) or Path(module.__file__).parent
        found.append((f"entry point {ep.name}", Path(folder)))
    return found


def default_rulebook() -> Rulebook:
    from diagnoser.engine import load_rulebook

    return load_rulebook()


def load_file(path: Path, book: Rulebook, origin: str | None = None) -> Prepared:
    return prepare(read_walkthrough(path), origin or str(path), path.parent, book)


def load_catalogue(
    extra: Iterable[str | Path] = (), *, bundled: bool = True, entry_points: bool = True, book: Rulebook | None = None
) -> dict[str, Prepared]:
    """Every walkthrough by name, prepared; two with one name are refused."""
    book = book or default_rulebook()
    sources: list[tuple[str | None, Path]] = []
    if bundled:
        sources += [(None, p) for p in walkthrough_files([BUNDLED])]
    if entry_points:
        for where, folder in _pack_folders():
            sources += [(f"{where}: {p.name}", p) for p in walkthrough_files([folder])]
    sources += [(None, p) for p in walkthrough_files(extra)]
    catalogue: dict[str, Prepared] = {}
    for origin, path in sources:
        prepared = load_file(path, book, origin)
        name = prepared.doc.name
        if name in catalogue:
            raise InputError(f"{prepared.origin}: walkthrough {name} is already defined in {catalogue[name].origin}")
        catalogue[name] = prepared
    return catalogue


def find(catalogue: dict[str, Prepared], name: str) -> Prepared:
    if name not in catalogue:
        hint = nearest(name, sorted(catalogue))
        raise InputError(f"no walkthrough named {name!r}" + (f" (nearest: {hint}); " if hint else "; ") + "`diagnoser walkthrough` lists them")
    return catalogue[name]
