"""Read an Nsight Systems SQLite export (``nsys export --type sqlite``) into ``RankTrace`` objects.

The export schema drifts between nsys releases (3.16 for 2024.6 up to 3.25 for 2026.2): tables
exist only when they have rows (unless exported with ``--lazy=false``) and columns get added.
So every query is built from what ``PRAGMA table_info`` reports, absent optional columns are
simply not filled, and what could not be read is listed in ``RankTrace.notes`` instead of
failing. Only a missing ``CUPTI_ACTIVITY_KIND_KERNEL`` table is fatal: without kernels there is
nothing to attribute.

Ranks. One ``RankTrace`` per (process, GPU) pair that ran GPU work, numbered in the order of
(physical GPU id, pid). The physical id comes from ``TARGET_INFO_CUDA_DEVICE`` when present,
else the CUDA device id as the process saw it; with one GPU per process (torchrun, vLLM
workers) this is the order of the GPUs, and with ``CUDA_VISIBLE_DEVICES`` set per rank (all
processes see device 0) it is the order of the pids, which is the launch order of the ranks.

Launches. CUPTI correlation ids are per process, so GPU work is joined to its runtime/driver
call on (pid, correlationId). Runtime rows go to the rank whose GPU work they launched; rows
that launched nothing (syncs, event calls) go to the process's first rank. Within one rank
correlation ids are then unique, so analyses join launches on ``correlation`` alone.

Limits. Times are read as the export wrote them (int64 ns); a capture whose events span more
than a day (``model.MAX_CAPTURE_NS``), a time or clock offset beyond ±2**62 ns, a negative
duration or a non-integer time is refused in one line naming the file and table; rows
identical in every column to an earlier row are dropped and counted in the notes.

Columns added on top of ``diagnoser.trace.model``: kernels ``graph_node`` / ``graph_id``
(-1 outside graphs) and ``whole_graph`` (a graph-mode ``GRAPH_TRACE`` row standing for a whole
graph execution whose node kernels were not traced), ``pid`` on kernels and copies, runtime
``sync_type`` (CUPTI sync record type, 0 when none), ranges ``domain`` (NVTX domain id).
"""

from __future__ import annotations

import re
import sqlite3
from array import array
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from diagnoser.errors import InputError
from diagnoser.trace.kineto import runtime_kind
from diagnoser.trace.model import (
    MAX_CAPTURE_NS, MAX_CLOCK_NS, CopyKind, RankTrace, RuntimeKind, Table, append_narrow, as_numpy, narrowest,
)
from diagnoser.trace.steps import is_step_mark
from diagnoser.trace.trace_file import regular_file

MAX_EXPORT_BYTES = 16 * 2**30  # hours of a busy 8-GPU node; a decode diagnosis needs seconds of it
MAX_NAME_CHARS = 4096  # the longest templated kernel name is a few hundred characters

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
NVTX = "NVTX_EVENTS"

TESTED_SCHEMAS = ((3, 16), (3, 25))
UNNAMED = "<name not in the export>"

_SQLITE_MAGIC = b"SQLite format 3\x00"
_PID_SQL = "(({col} >> 24) & 16777215)"
_TID_SQL = "({col} & 16777215)"

# NVTX event types that carry a duration: push/pop (59) and start/end (60) ranges.
_NVTX_RANGE_TYPES = (59, 60)
# CUPTI copyKind -> CopyKind; everything else (arrays, host-to-host) is "other".
_COPY_KINDS = {1: CopyKind.h2d, 2: CopyKind.d2h, 8: CopyKind.d2d, 10: CopyKind.d2d,
               11: CopyKind.h2d, 12: CopyKind.d2h, 13: CopyKind.d2d}

@dataclass
class _Schema:
    """Tables and their columns as this export has them."""

    columns: dict[str, set[str]]

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.columns.get(table)
        return cols is not None and (column is None or column in cols)

    def first(self, table: str, *candidates: str) -> str | None:
        return next((c for c in candidates if self.has(table, c)), None)


@dataclass
class _Strings:
    """The export's StringIds, with inline NVTX texts appended, as one interned list."""

    values: list[str]
    ids: np.ndarray  # StringIds.id of values[i], ascending; searched, never used as an index, so an id of 2**40 costs nothing
    # value -> its last index in values, kept as values grow: ids are looked up a piece of rows at a
    # time, and rebuilding it per piece would cost the whole string table each time
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.index = {value: index for index, value in enumerate(self.values)}

    def by_id(self, ids: np.ndarray) -> np.ndarray:
        """Indices for StringIds ids; an id StringIds lacks gets a placeholder name, never -1."""
        ids = ids.astype(np.int64)
        at = np.searchsorted(self.ids, ids).clip(0, max(len(self.ids) - 1, 0))
        found = (self.ids[at] == ids) if len(self.ids) else np.zeros(len(ids), dtype=bool)
        out = np.where(found, at, -1).astype(np.int32)
        if (out < 0).any():
            out[out < 0] = self.intern([UNNAMED])[0]
        return out

    def intern(self, texts: list[str]) -> np.ndarray:
        """Indices for ``texts`` (inline strings), adding each new value once.

        A dict, not ``np.unique``: sorting a million Python strings costs seconds, hashing them
        a fraction of that.
        """
        local: dict[str, int] = {}
        codes = np.fromiter((local.setdefault(t, len(local)) for t in texts), dtype=np.int32, count=len(texts))
        mapped = np.empty(len(local), dtype=np.int32)
        for value, code in local.items():
            if value not in self.index:
                self.add(value)
            mapped[code] = self.index[value]
        return mapped[codes]

    def add(self, value: str) -> int:
        self.values.append(value)
        self.index[value] = len(self.values) - 1
        return len(self.values) - 1


def read_nsys_sqlite(path: str | Path) -> list[RankTrace]:
    """All ranks (one per process and GPU) of one Nsight Systems SQLite export."""
    path = Path(path)
    with closing(_connect(path)) as db:
        try:
            return _read(db, path)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as err:  # a damaged page or schema text
            # SQLite quotes the damaged schema, newlines and all: one line, and not all of it
            detail = " ".join(str(err).split())
            raise InputError(f"{path}: unreadable SQLite export ({detail[:200]})") from None


def read_nsys_exports(paths: list[str | Path]) -> list[RankTrace]:
    """Ranks of several exports (one report per rank, ``nsys profile -o run_%q{RANK}``), numbered in turn.

    Files are taken in natural name order (``run_2`` before ``run_10``) and each one's ranks
    follow the previous file's; every report's clock is mapped to UTC, so they align.
    """
    def natural(path: Path) -> list:
        return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]

    traces: list[RankTrace] = []
    for path in sorted((Path(p) for p in paths), key=natural):
        for trace in read_nsys_sqlite(path):
            trace.rank = len(traces)
            traces.append(trace)
    return traces


def _connect(path: Path) -> sqlite3.Connection:
    if regular_file(path) > MAX_EXPORT_BYTES:
        raise InputError(f"{path}: larger than {MAX_EXPORT_BYTES / 2**30:g} GiB; export a shorter capture "
                         "(nsys profile --duration, or a few decode steps)")
    with open(path, "rb") as handle:
        head = handle.read(len(_SQLITE_MAGIC))
    if not head:
        raise InputError(f"{path}: empty file")
    if head != _SQLITE_MAGIC:
        raise InputError(f"{path}: not an SQLite database (export the report with `nsys export --type sqlite`)")
    # immutable: the input is never written and may sit on a read-only mount.
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    # a damaged string table is still read: a kernel name with a bad byte is a name, not a crash
    db.text_factory = lambda raw: raw.decode("utf-8", "replace")
    return db


def _read(db: sqlite3.Connection, path: Path) -> list[RankTrace]:
    schema = _read_schema(db)
    if not schema.has(KERNEL):
        raise InputError(f"{path}: no {KERNEL} table (nothing ran on a GPU in this export, or it is not an Nsight Systems export)")
    notes = _schema_notes(db, schema)
    strings = _read_strings(db, schema, notes)

    kernels = _read_kernels(db, schema, strings, path)
    graphs = _read_graph_trace(db, schema, strings, path)
    copies = _read_copies(db, schema, path)
    gpu_pid_known = schema.has(KERNEL, "globalPid")
    if not gpu_pid_known:
        notes.append(f"{KERNEL} has no globalPid column: ranks are told apart by device only")

    physical = _physical_gpu(db, schema)
    rank_keys = _rank_keys(kernels, graphs, copies, physical)
    if not rank_keys:
        raise InputError(f"{path}: {KERNEL} has no rows")

    runtime = _read_runtime(db, schema, strings, path, notes)
    ranges, left_out = _read_ranges(db, schema, strings, path, notes, keep=is_step_mark)
    tables = {KERNEL: kernels, GRAPH_TRACE: graphs, "memory copies and sets": copies, RUNTIME: runtime, NVTX: ranges}
    _check_capture(path, tables | {NVTX: left_out.bounds})  # the bounds of every range, left out or not
    kernels, graphs, copies, runtime, ranges = _without_duplicates(tables, notes, {NVTX: left_out.copies})
    offset = _clock_offset(db, schema, notes)
    devices = _device_info(db, schema)
    notes.extend(_graph_notes(db, schema, kernels, graphs, runtime))

    runtime_rank = _assign_runtime(runtime, rank_keys, [kernels, graphs, copies], gpu_pid_known)
    dropped = int(np.count_nonzero(runtime_rank < 0)) if runtime is not None else 0
    if dropped:
        notes.append(f"{dropped} runtime calls from processes without GPU work were left out")

    n = len(rank_keys)
    per_rank = zip(
        _split(kernels, _gpu_rank(kernels, rank_keys), n),
        _split(graphs, _gpu_rank(graphs, rank_keys), n),
        _split(copies, _gpu_rank(copies, rank_keys), n),
        _split(runtime, runtime_rank, n) if runtime is not None else [_empty_runtime() for _ in rank_keys],
        _ranges_per_rank(ranges, [pid for _, pid, _ in rank_keys]),
    )
    del kernels, graphs, copies, runtime, ranges  # each lives on in its ranks' slices only
    every_range = _EveryRange(path, [pid for _, pid, _ in rank_keys], strings.ids) if left_out.rows else None
    traces = []
    for rank, ((gpu, pid, device), (rank_kernels, rank_graphs, rank_copies, rank_runtime, rank_ranges)) in enumerate(
        zip(rank_keys, per_rank)
    ):
        rank_kernels = _concat(rank_kernels, rank_graphs)
        rank_notes = list(notes)
        _note_unlaunched(rank_kernels, rank_runtime, "kernels", rank_notes)
        _note_unlaunched(rank_copies, rank_runtime, "copies", rank_notes)
        name, sm_count = devices.get(gpu, devices.get(None, (None, None)))
        traces.append(
            RankTrace(
                source=f"{path} (pid {pid}, device {device})" if pid >= 0 else f"{path} (device {device})",
                rank=rank,
                strings=list(strings.values),
                kernels=rank_kernels,
                copies=rank_copies,
                runtime=rank_runtime,
                ranges=rank_ranges,
                clock_offset_ns=offset,
                device_sm_count=sm_count,
                device_name=name,
                notes=rank_notes,
            )
        )
        if every_range is not None:
            traces[-1].more_ranges = partial(every_range.of_rank, rank, traces[-1].strings)
    return traces


# --- schema -------------------------------------------------------------------------------


def _read_schema(db: sqlite3.Connection) -> _Schema:
    tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return _Schema({t: {row[1] for row in db.execute(f'PRAGMA table_info("{t}")')} for t in tables})


def _meta(db: sqlite3.Connection, schema: _Schema, table: str) -> dict[str, str]:
    if not schema.has(table, "name") or not schema.has(table, "value"):
        return {}
    return {str(name): str(value) for name, value in db.execute(f"SELECT name, value FROM {table}")}


def _schema_notes(db: sqlite3.Connection, schema: _Schema) -> list[str]:
    notes = []
    version = _meta(db, schema, "META_DATA_EXPORT").get("EXPORT_SCHEMA_VERSION")
    if version is None:
        notes.append("no export schema version recorded (META_DATA_EXPORT missing): read as the newest known schema")
    else:
        parts = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
        if len(parts) == 2 and not TESTED_SCHEMAS[0] <= parts <= TESTED_SCHEMAS[1]:
            low, high = (".".join(map(str, v)) for v in TESTED_SCHEMAS)
            notes.append(f"export schema {version} is outside the tested range {low}-{high}")
    for table, meaning in (
        (RUNTIME, "launch calls, syncs and host gaps cannot be attributed"),
        (MEMCPY, "no memory copies recorded"),
        (NVTX, "no NVTX ranges: steps cannot be segmented by a named range"),
        ("TARGET_INFO_GPU", "GPU name and SM count unknown"),
    ):
        if not schema.has(table):
            notes.append(f"no {table} table: {meaning}")
    return notes


def _read_strings(db: sqlite3.Connection, schema: _Schema, notes: list[str]) -> _Strings:
    if not schema.has("StringIds", "id"):
        notes.append("no StringIds table: names shown as numbers")
        return _Strings([], np.zeros(0, dtype=np.int64))
    # an id stored as text, a real or NULL is a damaged row, skipped; a name is cut at MAX_NAME_CHARS
    rows = db.execute(
        f"SELECT id, substr(CAST(value AS TEXT), 1, {MAX_NAME_CHARS}) FROM StringIds "
        "WHERE typeof(id) = 'integer' AND id BETWEEN -9223372036854775808 AND 9223372036854775807 ORDER BY id"
    ).fetchall()
    return _Strings([str(r[1]) for r in rows], np.array([r[0] for r in rows], dtype=np.int64))


# --- GPU activity ---------------------------------------------------------------------------


FETCH_ROWS = 1 << 16  # rows a fetch converts at a time: 64 K rows of ten ints are 5 MB
TIMES = ("start", "end")  # int64 nanoseconds; every other field is an id, a count or a size


def _int_columns(
    db: sqlite3.Connection, path: Path, table: str, fields: dict[str, str], tail: str = "", strings: _Strings | None = None
) -> dict[str, np.ndarray]:
    """``SELECT`` the integer expressions ``fields`` of ``table`` into one numpy column each; with
    ``strings``, the field ``name`` is a StringIds id, kept as the index of its string.

    Rows come ``FETCH_ROWS`` at a time (a list of Python tuples costs about ten times the array's
    memory: 0.96 GB per million kernels when fetched whole), and each field grows its own array:
    one table-wide block would be joined from its pieces (twice its size at once) and then kept
    whole by any one column still in use. Fields other than times grow in the narrowest type that
    holds them and names are looked up a piece at a time, so no column is ever held as int64 whole
    (24 M NVTX ranges in a 5 M-kernel export: 190 MB a column).
    """
    cursor = db.execute(f"SELECT {', '.join(fields.values())} FROM {table} {tail}")
    columns = {name: array("q" if name in TIMES else "b") for name in fields}
    while rows := cursor.fetchmany(FETCH_ROWS):
        try:
            block = np.array(rows, dtype=np.int64).reshape(len(rows), len(fields))
        except (TypeError, ValueError, OverflowError) as err:
            raise InputError(f"{path}: {table} has empty or non-integer values where times and ids belong") from err
        for i, (name, values) in enumerate(columns.items()):
            piece = block[:, i]
            if name in TIMES:
                values.frombytes(memoryview(np.ascontiguousarray(piece)).cast("B"))
            else:
                columns[name] = append_narrow(values, strings.by_id(piece) if strings and name == "name" else piece)
    return {name: as_numpy(values) for name, values in columns.items()}


def _opt(schema: _Schema, table: str, column: str, default: int = -1) -> str:
    return f"COALESCE({column}, {default})" if schema.has(table, column) else str(default)


def _graph_ref(schema: _Schema, table: str, column: str) -> str:
    """CUPTI writes 0 (or NULL in sparse exports) for work outside any graph; we use -1."""
    return f"COALESCE(NULLIF({column}, 0), -1)" if schema.has(table, column) else "-1"


def _pid_expr(schema: _Schema, table: str) -> str:
    return f"COALESCE({_PID_SQL.format(col='globalPid')}, -1)" if schema.has(table, "globalPid") else "-1"


def _check_durations(cols: dict[str, np.ndarray], table: str, path: Path) -> None:
    bad = int(np.count_nonzero(cols["end"] < cols["start"]))
    if bad:
        raise InputError(f"{path}: {bad} rows of {table} end before they start (negative duration)")


def _check_capture(path: Path, tables: dict[str, Table | None]) -> None:
    """Refuse times no capture can have: they would overflow once put on a common clock."""
    spans = [(int(t["start"].min()), int(t["end"].max()), name) for name, t in tables.items() if t is not None and len(t)]
    if not spans:
        return
    first = min(start for start, _, _ in spans)
    last, table = max((end, name) for _, end, name in spans)
    for value, name in ((first, min(spans)[2]), (last, table)):
        if abs(value) > MAX_CLOCK_NS:
            raise InputError(f"{path}: {name} holds a time of {value} ns, beyond any clock (more than 2**62 ns from zero)")
    if last - first > MAX_CAPTURE_NS:
        raise InputError(
            f"{path}: {table} has an event ending {(last - first) / 1e9:.6g} s after the capture's first event "
            "(refused: a capture longer than a day)"
        )


def _without_duplicates(tables: dict[str, Table | None], notes: list[str], left_out: dict[str, int] | None = None) -> list[Table | None]:
    """Each table less rows that repeat an earlier row exactly (an export merged twice), counted in a note
    with ``left_out``'s copies (among rows a table was read without)."""
    out, dropped = [], []
    for name, table in tables.items():
        if table is not None:
            table, n = table.without_duplicates()
            n += (left_out or {}).get(name, 0)
            if n:
                dropped.append(f"{n} in {name}")
        out.append(table)
    if dropped:
        notes.append(f"rows identical to an earlier row were dropped: {', '.join(dropped)}")
    return out


def _sorted_table(cols: dict[str, np.ndarray]) -> Table:
    """The columns in start order, each replaced as it is sorted: the table is never held twice, and
    a table already in order (as exports write most) is not copied at all. Times stay int64; ids,
    devices and shapes take the narrowest type that holds them (``model.narrowest``)."""
    start = cols["start"]
    order = None if (start[1:] >= start[:-1]).all() else np.argsort(start, kind="stable")
    for key in list(cols):
        column = cols[key] if order is None else cols[key][order]
        cols[key] = column if key in TIMES else narrowest(column)
    return Table(cols)


def _read_kernels(db: sqlite3.Connection, schema: _Schema, strings: _Strings, path: Path) -> Table:
    name_cols = [c for c in ("demangledName", "shortName", "mangledName") if schema.has(KERNEL, c)]
    name_expr = f"COALESCE({', '.join(name_cols)}, -1)" if name_cols else "-1"
    fields = {
        "start": "start", "end": '"end"', "device": _opt(schema, KERNEL, "deviceId", 0),
        "stream": _opt(schema, KERNEL, "streamId"), "correlation": _opt(schema, KERNEL, "correlationId"),
        "pid": _pid_expr(schema, KERNEL), "name": name_expr,
        "graph_node": _graph_ref(schema, KERNEL, "graphNodeId"), "graph_id": _graph_ref(schema, KERNEL, "graphId"),
    }
    dims = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    has_dims = all(schema.has(KERNEL, d) for d in dims)
    if has_dims:
        fields.update({d: _opt(schema, KERNEL, d, 1) for d in dims})
    if schema.has(KERNEL, "registersPerThread"):
        fields["registers"] = _opt(schema, KERNEL, "registersPerThread", 0)
    shared = [c for c in ("staticSharedMemory", "dynamicSharedMemory") if schema.has(KERNEL, c)]
    if shared:
        fields["shared_mem"] = " + ".join(f"COALESCE({c}, 0)" for c in shared)
    cols = _int_columns(db, path, KERNEL, fields, strings=strings)
    _check_durations(cols, KERNEL, path)
    if has_dims:  # the model wants CTAs per launch and threads per CTA
        cols["grid"] = np.prod(np.stack([cols.pop(d) for d in dims[:3]]), axis=0, dtype=np.int64)
        cols["block"] = np.prod(np.stack([cols.pop(d) for d in dims[3:]]), axis=0, dtype=np.int64)
    cols["whole_graph"] = np.zeros(len(cols["start"]), dtype=bool)
    return _sorted_table(cols)


def _read_graph_trace(db: sqlite3.Connection, schema: _Schema, strings: _Strings, path: Path) -> Table | None:
    """Graph-mode captures record each graph execution as one row: it stands in for its kernels."""
    if not schema.has(GRAPH_TRACE):
        return None
    fields = {
        "start": "start", "end": '"end"', "device": _opt(schema, GRAPH_TRACE, "deviceId", 0),
        "stream": _opt(schema, GRAPH_TRACE, "streamId"), "correlation": _opt(schema, GRAPH_TRACE, "correlationId"),
        "pid": _pid_expr(schema, GRAPH_TRACE), "graph_id": _opt(schema, GRAPH_TRACE, "graphId"),
    }
    cols = _int_columns(db, path, GRAPH_TRACE, fields)
    _check_durations(cols, GRAPH_TRACE, path)
    graph_ids, which = np.unique(cols["graph_id"], return_inverse=True)
    names = np.array([strings.add(f"CUDA graph {int(g)} (whole graph; nodes not traced)") for g in graph_ids], dtype=np.int32)
    cols["name"] = names[which.reshape(-1)] if len(graph_ids) else np.zeros(0, np.int32)
    cols["graph_node"] = np.full(len(cols["start"]), -1, dtype=np.int64)
    cols["whole_graph"] = np.ones(len(cols["start"]), dtype=bool)
    return _sorted_table(cols)


def _read_copies(db: sqlite3.Connection, schema: _Schema, path: Path) -> Table:
    parts = []
    for table, is_memset in ((MEMCPY, False), (MEMSET, True)):
        if not schema.has(table):
            continue
        fields = {
            "start": "start", "end": '"end"', "device": _opt(schema, table, "deviceId", 0),
            "stream": _opt(schema, table, "streamId"), "correlation": _opt(schema, table, "correlationId"),
            "pid": _pid_expr(schema, table), "bytes": _opt(schema, table, "bytes", 0),
            "cupti_kind": "-1" if is_memset else _opt(schema, table, "copyKind", 0),
        }
        cols = _int_columns(db, path, table, fields)
        _check_durations(cols, table, path)
        parts.append(cols)
    if not parts:
        return _sorted_table({k: np.zeros(0, np.int64) for k in ("start", "end", "device", "stream", "correlation", "pid", "bytes", "kind")})
    cols = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    cupti = cols.pop("cupti_kind")
    kind = np.full(len(cupti), int(CopyKind.other), dtype=np.int8)
    for code, ours in _COPY_KINDS.items():
        kind[cupti == code] = int(ours)
    kind[cupti == -1] = int(CopyKind.memset)
    cols["kind"] = kind
    return _sorted_table(cols)


# --- ranks ----------------------------------------------------------------------------------


def _physical_gpu(db: sqlite3.Connection, schema: _Schema) -> dict[tuple[int, int], int]:
    """(pid, CUDA device id as the process saw it) -> physical GPU id, where nsys recorded it."""
    table = "TARGET_INFO_CUDA_DEVICE"
    if not all(schema.has(table, c) for c in ("gpuId", "cudaId", "pid")):
        return {}
    rows = db.execute(f"SELECT gpuId, cudaId, pid FROM {table}")
    return {(pid, cuda): gpu for gpu, cuda, pid in rows if all(_is_int(v) for v in (gpu, cuda, pid))}


def _is_int(value: object) -> bool:
    """SQLite columns are typed per value: an id stored as text or a real is a damaged row, skipped."""
    return isinstance(value, int) and not isinstance(value, bool)


def _rank_keys(kernels: Table, graphs: Table | None, copies: Table, physical: dict) -> list[tuple[int, int, int]]:
    """Sorted (physical GPU, pid, device) triples of everything that ran GPU work."""
    pairs: set[tuple[int, int]] = set()
    for table in (kernels, graphs, copies):
        if table is not None and len(table):
            pairs.update(zip(table["pid"].tolist(), table["device"].tolist()))
    return sorted((physical.get((pid, dev), dev), pid, dev) for pid, dev in pairs)


def _gpu_rank(table: Table | None, rank_keys: list[tuple[int, int, int]]) -> np.ndarray | None:
    """The rank of each row of GPU work: the index of its (pid, device) in ``rank_keys``."""
    if table is None:
        return None
    pairs = np.array([_join_key(np.int64(pid), np.int64(dev), True) for _, pid, dev in rank_keys], dtype=np.int64)
    return _lookup(pairs, _join_key(table["pid"], table["device"], True))


def _split(table: Table | None, rank: np.ndarray | None, ranks: int) -> list[Table | None]:
    """Each rank's rows of ``table`` (``rank`` -1: no rank's), in their order, as slices of the table
    reordered by rank in place, a column at a time: a copy per rank would hold the table twice
    over once the last one is made (a 5 M-kernel export holds GBs of rows). The rows are picked by
    one mask per rank, a byte a row each, where an argsort's order would be eight."""
    if table is None or rank is None:
        return [None] * ranks
    masks = [rank == r for r in range(ranks)]
    bounds = np.cumsum([0] + [np.count_nonzero(mask) for mask in masks]).tolist()
    for key, column in list(table.columns.items()):
        table.columns[key] = np.empty(bounds[-1], dtype=column.dtype)
        for mask, lo, hi in zip(masks, bounds, bounds[1:]):
            np.compress(mask, column, out=table.columns[key][lo:hi])
    return [Table({key: col[lo:hi] for key, col in table.columns.items()}) for lo, hi in zip(bounds, bounds[1:])]


def _concat(kernels: Table, graphs: Table | None) -> Table:
    if graphs is None or not len(graphs):
        return kernels
    cols = {}
    for key, col in kernels.columns.items():
        if key in graphs:
            cols[key] = np.concatenate([col, graphs[key]])  # each narrowed apart: the wider type holds both
        else:  # launch geometry and resources are per node; a whole-graph row has none
            fill = np.full(len(graphs), -1, dtype=col.dtype)
            cols[key] = np.concatenate([col, fill])
    return _sorted_table(cols)


# --- host side ------------------------------------------------------------------------------


def _empty_runtime() -> Table:
    cols = {k: np.zeros(0, np.int64) for k in ("start", "end", "pid", "tid", "correlation", "sync_type")}
    cols.update(name=np.zeros(0, np.int32), kind=np.zeros(0, np.int8))
    return Table(cols)


def _read_runtime(db: sqlite3.Connection, schema: _Schema, strings: _Strings, path: Path, notes: list[str]) -> Table | None:
    if not schema.has(RUNTIME):
        return None
    tid_col = "globalTid" if schema.has(RUNTIME, "globalTid") else None
    fields = {
        "start": "start", "end": '"end"',
        "pid": f"COALESCE({_PID_SQL.format(col=tid_col)}, -1)" if tid_col else "-1",
        "tid": f"COALESCE({_TID_SQL.format(col=tid_col)}, -1)" if tid_col else "-1",
        "correlation": _opt(schema, RUNTIME, "correlationId"),
        "name": _opt(schema, RUNTIME, "nameId"),
    }
    cols = _int_columns(db, path, RUNTIME, fields, strings=strings)
    _check_durations(cols, RUNTIME, path)
    cols["kind"] = _classify(cols["name"], strings.values)
    cols["sync_type"] = _sync_types(db, schema, cols, path)
    if not schema.has(SYNC):
        notes.append(f"no {SYNC} table: sync waits known only from API names")
    return _sorted_table(cols)


def _classify(names: np.ndarray, values: list[str]) -> np.ndarray:
    """Classify each distinct name once, then look each row's up by its name index (nsys's "_v7000"
    suffixes do not matter: the patterns match name prefixes). A table by name, not
    ``np.unique(return_inverse=True)``: its inverse is eight bytes a row (9 M calls in a 5 M-kernel export)."""
    kinds = np.zeros(len(values), dtype=np.int8)
    for i in np.unique(names).tolist():
        kinds[i] = int(runtime_kind(values[i]))
    return kinds[names]


def _sync_types(db: sqlite3.Connection, schema: _Schema, runtime: dict[str, np.ndarray], path: Path) -> np.ndarray:
    """CUPTI's sync record type per runtime call (1 event, 2 stream-wait-event, 3 stream, 4 context)."""
    out = np.zeros(len(runtime["start"]), dtype=np.int64)
    if not schema.has(SYNC) or not schema.has(SYNC, "correlationId"):
        return out
    type_col = schema.first(SYNC, "syncType", "deprecatedSyncType")
    fields = {"pid": _pid_expr(schema, SYNC), "correlation": "correlationId",
              "type": f"COALESCE({type_col}, 0)" if type_col else "0"}
    sync = _int_columns(db, path, SYNC, fields)
    keys = _join_key(sync["pid"], sync["correlation"], schema.has(SYNC, "globalPid"))
    mine = _join_key(runtime["pid"], runtime["correlation"], schema.has(SYNC, "globalPid"))
    index = _lookup(keys, mine)
    out[index >= 0] = sync["type"][index[index >= 0]]
    return out


def _join_key(pid: np.ndarray, correlation: np.ndarray, use_pid: bool) -> np.ndarray:
    """Correlation ids repeat across processes; (pid, id) is unique."""
    return (pid.astype(np.int64) << 32) + correlation if use_pid else correlation.astype(np.int64)


def _lookup(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Index of each query in ``keys`` (first occurrence), -1 when absent. Queries go ``FETCH_ROWS``
    at a time: a search's positions and matches are 8 bytes a query each, and all at once they were
    the reader's peak (9 M runtime calls in a 5 M-kernel export: 70 MB an array)."""
    out = np.full(len(queries), -1, dtype=np.int64)
    if not len(keys):
        return out
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    for lo in range(0, len(queries), FETCH_ROWS):
        piece = queries[lo : lo + FETCH_ROWS]
        pos = np.clip(np.searchsorted(ordered, piece), 0, len(ordered) - 1)
        out[lo : lo + len(piece)] = np.where(ordered[pos] == piece, order[pos], -1)
    return out


def _assign_runtime(runtime: Table | None, rank_keys: list, gpu_tables: list, pid_known: bool) -> np.ndarray:
    """Rank of each runtime row: the rank of the GPU work it launched, else its process's first rank.
    Ranks are a few: they are held a byte a row, not eight, beside the int64 keys of the join."""
    if runtime is None:
        return np.zeros(0, dtype=np.int64)
    rank_pairs = np.array([_join_key(np.int64(pid), np.int64(dev), True) for _, pid, dev in rank_keys], dtype=np.int64)
    keys, ranks = [], []
    for table in gpu_tables:
        if table is None or not len(table):
            continue
        keys.append(_join_key(table["pid"], table["correlation"], pid_known))
        ranks.append(narrowest(_lookup(rank_pairs, _join_key(table["pid"], table["device"], True))))
    all_keys, all_ranks = np.concatenate(keys), np.concatenate(ranks)
    hit = _lookup(all_keys, _join_key(runtime["pid"], runtime["correlation"], pid_known))
    if pid_known:  # lookup returns the first match, and ranks are numbered in key order
        fallback = narrowest(_lookup(np.array([pid for _, pid, _ in rank_keys], dtype=np.int64), runtime["pid"]))
    else:
        fallback = np.zeros(len(runtime), dtype=np.int8)
    return narrowest(np.where(hit >= 0, all_ranks[np.maximum(hit, 0)], fallback))


def _note_unlaunched(table: Table, runtime: Table, what: str, notes: list[str]) -> None:
    """Say how much GPU work has no launching call: it was issued before the exported window."""
    if not len(runtime):
        return
    missing = int(np.count_nonzero(_lookup(runtime["correlation"], table["correlation"]) < 0))
    if missing:
        notes.append(f"{missing} of {len(table)} {what} have no launch call in the export (launched before its window)")


@dataclass
class _LeftOut:
    """What ``_read_ranges`` knows of the ranges it did not keep: how many, how many repeat an earlier
    left-out row exactly, and the earliest start and latest end of all ranges (for ``_check_capture``)."""

    rows: int = 0
    copies: int = 0
    bounds: Table = field(default_factory=lambda: Table({"start": np.zeros(0, np.int64), "end": np.zeros(0, np.int64)}))


def _read_ranges(
    db: sqlite3.Connection, schema: _Schema, strings: _Strings, path: Path, notes: list[str],
    keep: Callable[[str], bool] | None = None,
) -> tuple[Table, _LeftOut]:
    """NVTX push/pop and start/end ranges; with ``keep``, only those whose name it accepts.

    The step finder reads only step marks unless a range is named (``steps.is_step_mark``), and a
    5 M-kernel export holds 24 M ranges (23 bytes each held, 550 MB): the others are dropped as each
    piece is fetched, their texts still interned (names and their indices are as if all were kept),
    and ``RankTrace.more_ranges`` reads them again when asked. The checks see every range: durations
    here, the capture's bounds and the duplicate count through ``_LeftOut``."""
    left_out = _LeftOut()
    if not schema.has(NVTX):
        return _empty_ranges(), left_out
    where = _range_where(schema)
    open_ended = db.execute(f'SELECT COUNT(*) FROM {NVTX} WHERE {where} AND "end" IS NULL').fetchone()[0]
    if open_ended:
        notes.append(f"{open_ended} NVTX ranges were still open at the end of the export and were left out")
    where += ' AND "end" IS NOT NULL'
    columns = {name: array("q" if name in TIMES else "b") for name in _RANGE_FIELDS}
    wanted = array("b")  # keep's answer per string index, grown as names are interned
    starts, negative, first, last = array("q"), 0, None, None  # the left-out starts; all ranges' bounds
    for piece in _range_pieces(db, schema, strings, path, where):
        negative += int(np.count_nonzero(piece["end"] < piece["start"]))
        lo, hi = int(piece["start"].min()), int(piece["end"].max())
        first, last = lo if first is None else min(first, lo), hi if last is None else max(last, hi)
        if keep is not None:
            wanted.extend(keep(v) for v in strings.values[len(wanted):])
            mask = as_numpy(wanted)[piece["name"]].astype(bool)
            if not mask.all():
                starts.frombytes(memoryview(np.ascontiguousarray(piece["start"][~mask])).cast("B"))
                piece = {name: column[mask] for name, column in piece.items()}
        for name, values in columns.items():
            if name in TIMES:
                values.frombytes(memoryview(np.ascontiguousarray(piece[name])).cast("B"))
            else:
                columns[name] = append_narrow(values, piece[name])
    if negative:
        raise InputError(f"{path}: {negative} rows of {NVTX} end before they start (negative duration)")
    if first is not None:
        left_out.bounds = Table({"start": np.array([first], np.int64), "end": np.array([last], np.int64)})
    if len(starts):
        left_out.rows = len(starts)
        left_out.copies = _left_out_copies(db, schema, strings, path, where, as_numpy(wanted).astype(bool), as_numpy(starts))
    del starts
    cols = {name: as_numpy(values) for name, values in columns.items()}
    if not len(cols["start"]):
        return _empty_ranges(), left_out
    return _sorted_table(cols), left_out


_RANGE_FIELDS = ("start", "end", "domain", "pid", "tid", "name")


def _range_where(schema: _Schema) -> str:
    types = ", ".join(map(str, _NVTX_RANGE_TYPES))
    return f"eventType IN ({types})" if schema.has(NVTX, "eventType") else "1"


def _range_pieces(db: sqlite3.Connection, schema: _Schema, strings: _Strings, path: Path, where: str) -> Iterator[dict[str, np.ndarray]]:
    """``FETCH_ROWS`` ranges at a time as int64 columns, ``name`` the index of the range's string: its
    inline text where it has one (interned), else its registered string. Two scans, integers and
    texts, in rowid order so their pieces line up (a fetch of all rows holds ~100 bytes a range)."""
    known = "CASE WHEN globalTid >= 0 THEN {} ELSE -1 END"  # NULL or negative: no process or thread
    fields = {"start": "start", "end": '"end"', "domain": _opt(schema, NVTX, "domainId", 0),
              "pid": known.format(_PID_SQL.format(col="globalTid")), "tid": known.format(_TID_SQL.format(col="globalTid")),
              # Registered strings live in textId with text NULL (NCCL's ranges are all like that).
              "name": _opt(schema, NVTX, "textId")}
    ints = db.execute(f"SELECT {', '.join(fields.values())} FROM {NVTX} WHERE {where} ORDER BY rowid")
    texts = db.execute(f"SELECT text FROM {NVTX} WHERE {where} ORDER BY rowid") if schema.has(NVTX, "text") else None
    while rows := ints.fetchmany(FETCH_ROWS):
        try:
            block = np.array(rows, dtype=np.int64).reshape(len(rows), len(fields))
        except (TypeError, ValueError, OverflowError) as err:
            raise InputError(f"{path}: {NVTX} has empty or non-integer values where times and ids belong") from err
        piece = {name: block[:, i] for i, name in enumerate(fields)}
        piece["name"] = strings.by_id(piece["name"])
        if texts is not None:
            inline = texts.fetchmany(len(rows))
            has_text = np.array([r[0] is not None for r in inline], dtype=bool)
            if has_text.any():
                piece["name"][has_text] = strings.intern([str(r[0]) for r in inline if r[0] is not None])
        yield piece


def _left_out_copies(
    db: sqlite3.Connection, schema: _Schema, strings: _Strings, path: Path, where: str, wanted: np.ndarray, starts: np.ndarray
) -> int:
    """How many left-out ranges repeat an earlier one exactly. Only rows that share a start can, and
    they are few: their starts are found from the left-out starts alone (sorted in place), and only
    when there are any are those rows fetched again and compared whole."""
    starts.sort()
    shared = np.unique(starts[1:][starts[1:] == starts[:-1]])
    if not len(shared):
        return 0
    seen: set[tuple] = set()
    copies = 0
    for piece in _range_pieces(db, schema, strings, path, where):
        rows = np.flatnonzero(~wanted[piece["name"]] & np.isin(piece["start"], shared))
        for row in zip(*(piece[name][rows].tolist() for name in _RANGE_FIELDS)):
            if row in seen:
                copies += 1
            else:
                seen.add(row)
    return copies


class _EveryRange:
    """Every NVTX range of an export's ranks, read again when one asks (``RankTrace.more_ranges``):
    as the reader would without leaving any out, less duplicates, split by rank. One read serves each
    rank once; each rank's table is let go as it is handed over."""

    def __init__(self, path: Path, pids: list[int], string_ids: np.ndarray) -> None:
        self.path, self.pids, self.string_ids = path, pids, string_ids
        self.tables: list[Table | None] = []

    def of_rank(self, rank: int, strings: list[str]) -> Table:
        if rank >= len(self.tables) or self.tables[rank] is None:
            self.tables = self._read(strings)
        table, self.tables[rank] = self.tables[rank], None
        return table

    def _read(self, strings: list[str]) -> list[Table | None]:
        # the rank's own strings: every name was interned when the export was first read, so every
        # index found again is the one the first read gave
        with closing(_connect(self.path)) as db:
            schema = _read_schema(db)
            ranges, _ = _read_ranges(db, schema, _Strings(strings, self.string_ids), self.path, [])
        ranges, _ = ranges.without_duplicates()
        return list(_ranges_per_rank(ranges, self.pids))


def _empty_ranges() -> Table:
    cols = {k: np.zeros(0, np.int64) for k in ("start", "end", "pid", "tid", "domain")}
    cols["name"] = np.zeros(0, np.int32)
    return Table(cols)


def _ranges_per_rank(ranges: Table, pids: list[int]) -> list[Table]:
    """NVTX ranges are per process; a process driving two GPUs contributes them to both (a copy
    each), a rank without a process gets them all. One process per rank, as usual, splits them."""
    if len(set(pids)) == len(pids) and min(pids, default=0) >= 0:
        rank = np.full(len(ranges), -1, dtype=np.int8 if len(pids) < 128 else np.int32)  # not _lookup's int64s
        for index, pid in enumerate(pids):
            rank[ranges["pid"] == pid] = index
        return _split(ranges, rank, len(pids))
    return [ranges.take(np.arange(len(ranges)) if pid < 0 else np.flatnonzero(ranges["pid"] == pid)) for pid in pids]


# --- session and devices -------------------------------------------------------------------


def _clock_offset(db: sqlite3.Connection, schema: _Schema, notes: list[str]) -> int:
    """Offset that puts this report's session clock on UTC, so separate reports (one per rank) align."""
    export = _meta(db, schema, "META_DATA_EXPORT")
    if export.get("EXPORT_PARAM_TIME_NORMALIZE", "").lower() == "true":
        return 0
    table = "TARGET_INFO_SESSION_START_TIME"
    if schema.has(table, "utcEpochNs"):
        row = db.execute(f"SELECT * FROM {table} LIMIT 1").fetchone()
        values = dict(zip([d[0] for d in db.execute(f"SELECT * FROM {table} LIMIT 0").description], row or ()))
        session_start = values.get("systemClockNs")
        if session_start is None and schema.has("ANALYSIS_DETAILS", "startTime"):
            found = db.execute("SELECT startTime FROM ANALYSIS_DETAILS LIMIT 1").fetchone()
            session_start = found[0] if found else None
        if values.get("utcEpochNs") is not None and session_start is not None:
            try:
                offset = int(values["utcEpochNs"]) - int(session_start)
            except (TypeError, ValueError):
                offset = None
            if offset is not None and abs(offset) <= MAX_CLOCK_NS:
                return offset
            notes.append(f"session start time {values['utcEpochNs']!r} is not a clock in range: ignored")
            return 0
    notes.append("no session start time: this report's clock cannot be aligned with other reports")
    return 0


def _device_info(db: sqlite3.Connection, schema: _Schema) -> dict[int | None, tuple[str | None, int | None]]:
    """GPU id -> (name, SM count); key None holds the only GPU when the export has just one."""
    info: dict[int | None, tuple[str | None, int | None]] = {}
    if schema.has("TARGET_INFO_GPU", "id"):
        name = "name" if schema.has("TARGET_INFO_GPU", "name") else "NULL"
        sms = "smCount" if schema.has("TARGET_INFO_GPU", "smCount") else "NULL"
        for gpu, gpu_name, sm in db.execute(f"SELECT id, {name}, {sms} FROM TARGET_INFO_GPU"):
            if _is_int(gpu):
                info[gpu] = (gpu_name if isinstance(gpu_name, str) else None, sm if _is_int(sm) else None)
    table = "TARGET_INFO_CUDA_DEVICE"
    if schema.has(table, "gpuId") and schema.has(table, "numMultiprocessors"):
        # The CUDA view of the device knows its SM count even when TARGET_INFO_GPU does not.
        for gpu, sm in db.execute(f"SELECT gpuId, numMultiprocessors FROM {table}"):
            if _is_int(gpu):
                known_name, known_sm = info.get(gpu, (None, None))
                info[gpu] = (known_name, known_sm if known_sm is not None else (sm if _is_int(sm) else None))
    if len(info) == 1:
        info[None] = next(iter(info.values()))
    return info


def _graph_notes(db: sqlite3.Connection, schema: _Schema, kernels: Table, graphs: Table | None, runtime: Table | None) -> list[str]:
    """Warn when graph replays happened but their kernels are not in the export."""
    mode = _meta(db, schema, "META_DATA_CAPTURE").get("CUDA_GRAPH_TRACE_OPTIONS:MODE")
    launches = 0 if runtime is None else int(np.count_nonzero(runtime["kind"] == int(RuntimeKind.graph_launch)))
    node_kernels = int(np.count_nonzero(kernels["graph_node"] >= 0))
    whole = 0 if graphs is None else len(graphs)
    if launches and not node_kernels:
        detail = f"{whole} graph executions recorded as whole-graph rows" if whole else "their kernels are missing"
        return [f"{launches} CUDA graph launches but no per-node kernels ({detail}); capture with --cuda-graph-trace=node to see them"]
    if mode and mode.lower() == "graph" and not launches:
        return ["captured with --cuda-graph-trace=graph: any CUDA graph replay would show no per-node kernels"]
    return []
