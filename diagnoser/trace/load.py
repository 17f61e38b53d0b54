"""One entry point for every trace format: ``load_traces(paths) -> list[RankTrace]``.

The reader is chosen by content and suffix so users can pass whatever the profiler wrote:
Kineto ``.json``/``.json.gz`` files or a directory of them (one per rank), an Nsight Systems
``.sqlite`` export, or an ``.nsys-rep`` report (exported to SQLite first, by ``nsys``).
A directory's traces are its ``.json``, ``.json.gz`` and ``.sqlite`` files; when it holds
none, the message names what it does hold, since a wrong folder is the usual cause.
Only regular files are opened (``trace_file.regular_file``): a FIFO or a device is refused
before anything reads it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from diagnoser.errors import InputError
from diagnoser.trace.model import RankTrace
from diagnoser.trace.trace_file import regular_file

_SQLITE_MAGIC = b"SQLite format 3\x00"


def _kind(path: Path) -> str:
    if path.is_dir():
        return "dir"
    regular_file(path)
    if path.suffix == ".nsys-rep" or path.suffix == ".qdrep":
        return "nsys-rep"
    with open(path, "rb") as handle:
        head = handle.read(16)
    if head == _SQLITE_MAGIC:
        return "sqlite"
    if path.suffix in (".sqlite", ".db"):
        raise InputError(f"{path}: not an SQLite database (expected an Nsight Systems export: nsys export --type sqlite)")
    return "kineto"


_TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")


def _folder_traces(directory: Path) -> list[Path]:
    entries = sorted(directory.iterdir())
    files = [p for p in entries if p.is_file() and p.name.endswith(_TRACE_SUFFIXES)]
    if files:
        return files
    if not entries:
        raise InputError(f"{directory}: empty folder, no trace files; pass trace files explicitly")
    shown = ", ".join(p.name + ("/" if p.is_dir() else "") for p in entries[:5])
    more = f" and {len(entries) - 5} more" if len(entries) > 5 else ""
    raise InputError(
        f"{directory}: no trace files in this folder (found {shown}{more}; traces end in "
        f"{', '.join(_TRACE_SUFFIXES)}); pass trace files explicitly: diagnoser analyze FILE..."
    )


def load_traces(paths: list[str | Path], workers: int | None = None, memory: int | None = None) -> list[RankTrace]:
    """All ranks from all inputs, sorted by rank; each rank must appear once. ``memory``: the bytes
    Kineto ranks read at once may hold together (``memory_budget``; default 2 GiB)."""
    from diagnoser.trace.kineto import read_kineto_many

    if not paths:
        raise InputError("no trace given")
    kineto: list[Path] = []
    exports: list[Path] = []
    traces: list[RankTrace] = []
    for raw in paths:
        path = Path(raw)
        kind = _kind(path)
        if kind == "dir":
            for found in _folder_traces(path):
                (exports if _kind(found) == "sqlite" else kineto).append(found)
        elif kind == "kineto":
            kineto.append(path)
        elif kind == "nsys-rep":
            from diagnoser.trace.nsys_export import export_sqlite

            exports.append(export_sqlite(path))
        else:
            exports.append(path)
    if exports:
        from diagnoser.trace.nsys_sqlite import read_nsys_exports

        # one report per rank: numbered in file-name order, each report's clock mapped to UTC
        traces.extend(read_nsys_exports(exports))
    if kineto:
        traces.extend(read_kineto_many(kineto, workers, memory))
    repeated = [rank for rank, n in Counter(t.rank for t in traces).items() if n > 1]
    if repeated:
        sources = ", ".join(t.source for t in traces if t.rank == repeated[0])
        raise InputError(f"{sources}: rank {repeated[0]} appears more than once")
    return sorted(traces, key=lambda t: t.rank)

