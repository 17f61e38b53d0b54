"""PyTorch profiler (Kineto) Chrome-trace JSON into the columnar model.

    read_kineto(path) -> RankTrace          one .json / .json.gz file
    read_kineto_many(paths) -> list[RankTrace]   several ranks, parsed in parallel processes

The whole document is decompressed in one streamed pass and parsed by orjson (the fastest
JSON parser available to us); events are then bucketed by category once and each column is
built by one comprehension, so no per-event Python object outlives the read. Events we do
not use (python_function, cpu_op, flows) are skipped on their category alone.

Kineto writes microseconds (ints or floats); we keep int64 nanoseconds, subtracting a base
before scaling so epoch-microsecond timestamps (1.7e15) keep their precision.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import zlib
from array import array
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import orjson

from diagnoser.errors import InputError
from diagnoser.models.precision import DType
from diagnoser.trace.chunked_json import NotSplittable, event_pieces
from diagnoser.trace.model import CopyKind, RankTrace, RuntimeKind, Table
from diagnoser.trace.roofline import MATMUL_OPS, matmul_cost

_KERNEL_CATS = {"kernel", "Kernel"}
_COPY_CATS = {"gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
_RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver", "Driver"}
_RANGE_CATS = {"user_annotation"}

_RUNTIME_KINDS: tuple[tuple[re.Pattern[str], RuntimeKind], ...] = (
    (re.compile(r"^(cuda|cu|hip)(Ext)?(Module)?Launch(Cooperative)?Kernel"), RuntimeKind.kernel_launch),
    (re.compile(r"^(cuda|cu|hip)GraphLaunch"), RuntimeKind.graph_launch),
    (re.compile(r"^(cuda|cu|hip)(Device|Stream|Event|Ctx)Synchronize"), RuntimeKind.sync),
    (re.compile(r"^(cuda|cu|hip)Memcpy"), RuntimeKind.memcpy),
    (re.compile(r"^(cuda|cu|hip)Memset"), RuntimeKind.memset),
)
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def runtime_kind(name: str) -> RuntimeKind:
    return next((kind for pattern, kind in _RUNTIME_KINDS if pattern.match(name)), RuntimeKind.other)


def copy_kind(name: str) -> CopyKind:
    if name.startswith("Memset"):
        return CopyKind.memset
    for token, kind in (("HtoD", CopyKind.h2d), ("DtoH", CopyKind.d2h), ("DtoD", CopyKind.d2d)):
        if token in name:
            return kind
    return CopyKind.other


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic (whatever its suffix)."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(2)
            handle.seek(0)
            if magic == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=handle) as unzipped:
                    return unzipped.read()
            return handle.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise InputError(f"{path}: truncated or corrupt gzip ({err})") from None


def _parse(path: Path, data: bytes) -> dict:
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None
    if isinstance(document, list):  # the Chrome format also allows a bare event array
        document = {"traceEvents": document}
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise InputError(f"{path}: not a Chrome/Kineto trace (no traceEvents list)")
    return document


def _num(value: object, default: int = -1) -> int:
    """Integer fields; pid/tid are strings on Kineto's synthetic rows ("Spans"), those become the default."""
    return int(value) if isinstance(value, (int, float)) else default


# Bytes per element of the ScalarType names PyTorch writes as a collective's "dtype".
_ELEMENT_BYTES = {
    "Float": 4, "Float32": 4, "Int": 4, "Int32": 4,
    "BFloat16": 2, "Half": 2, "Float16": 2,
    "Byte": 1, "Char": 1, "Bool": 1,
    "Long": 8, "Int64": 8, "Double": 8,
}  # fmt: skip
_MSG_IN, _MSG_OUT = "In msg nelems", "Out msg nelems"


def _msg_bytes(args: dict) -> int:
    """A collective's message size in bytes, 0 when unknown (no size args, odd values, unknown dtype).

    The larger of the input and output buffers: the whole gathered output of an all-gather,
    the whole input of a reduce-scatter, which is the "size" nccl-tests reports against.
    """
    dtype = args.get("dtype")
    size = 1 if isinstance(dtype, str) and dtype.startswith("Float8") else _ELEMENT_BYTES.get(dtype, 0)
    counts = [args[k] for k in (_MSG_IN, _MSG_OUT) if k in args]
    if not counts or not size or not all(type(n) in (int, float) and 0 <= n < 2**53 for n in counts):
        return 0
    return int(max(counts)) * size


def _dims(value: object) -> int:
    """Product of a [x, y, z] launch dimension, -1 when absent."""
    if not isinstance(value, list) or not value:
        return -1
    out = 1
    for d in value:
        out *= _num(d, 1)
    return out


class _Router:
    """Turns each piece of events into compact row tuples at once and drops the event dicts.

    Only what the analysis reads survives (no Python stack frames, CPU ops or flow arrows),
    as tuples of numbers with interned names, so memory holds a few numbers per kept event.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name_index: dict[str, int] = {}
        self.strings: list[str] = []
        self.kernels: list[tuple] = []
        self.copies: list[tuple] = []
        self.runtime: list[tuple] = []
        self.ranges: list[tuple] = []
        self.matmuls: list[tuple] = []
        self.python_calls = array("d")  # 8 bytes a call: with_stack traces hold millions of them
        self.syncs = 0

    def _name(self, event: dict) -> int:
        name = event.get("name", "")
        found = self.name_index.get(name)
        if found is None:
            found = self.name_index[name] = len(self.strings)
            self.strings.append(str(name))
        return found

    def _head(self, event: dict) -> tuple:
        """The fields every kept row starts with: ts, dur (us, as written) and the interned name."""
        return event.get("ts"), event.get("dur", 0), self._name(event)

    def consume(self, events: list) -> None:
        for event in events:
            if not isinstance(event, dict):
                raise InputError(f"{self.path}: traceEvents holds a non-object entry")
            if event.get("ph") != "X":
                continue
            cat = event.get("cat")
            args = event.get("args") or {}
            if cat in _RUNTIME_CATS:
                pid, tid = _num(event.get("pid")), _num(event.get("tid"))
                self.runtime.append((*self._head(event), pid, tid, _num(args.get("correlation"))))
            elif cat in _KERNEL_CATS:
                where = (_num(args.get("device"), 0), _num(args.get("stream")), _num(args.get("correlation")))
                shape = (_dims(args.get("grid")), _dims(args.get("block")))
                resources = (_num(args.get("registers per thread")), _num(args.get("shared memory")))
                # only collectives carry sizes: other kernels skip the call
                nbytes = _msg_bytes(args) if _MSG_IN in args or _MSG_OUT in args else 0
                self.kernels.append((*self._head(event), *where, *shape, *resources, nbytes))
            elif cat in _COPY_CATS:
                where = (_num(args.get("device"), 0), _num(args.get("stream")), _num(args.get("correlation")))
                self.copies.append((*self._head(event), *where, _num(args.get("bytes"), 0)))
            elif cat in _RANGE_CATS:
                self.ranges.append((*self._head(event), _num(event.get("pid")), _num(event.get("tid"))))
            elif cat == "cpu_op":
                if event.get("name") in MATMUL_OPS:
                    cost = matmul_cost(event["name"], args.get("Input Dims") or [], args.get("Input type") or [])
                    if cost is not None:
                        self.matmuls.append((event.get("ts"), event.get("dur", 0), _num(event.get("tid")), *cost))
            elif cat == "cuda_sync":
                self.syncs += 1
            elif cat == "python_function" and isinstance(event.get("ts"), (int, float)):
                self.python_calls.append(event["ts"])

    def empty(self) -> bool:
        return not (self.kernels or self.copies or self.runtime or self.ranges)


def _route_events(path: Path, data: bytes) -> tuple[dict, _Router]:
    """Parse in pieces when the bytes allow it (lower peak memory), else whole."""
    router = _Router(path)
    try:
        for document, events in event_pieces(data):
            router.consume(events)
        return document, router
    except NotSplittable:
        router = _Router(path)
        document = _parse(path, data)
        router.consume(document["traceEvents"])
        return document, router


def _columns(path: Path, rows: list[tuple], names: tuple[str, ...], base_us: int) -> dict[str, np.ndarray]:
    """Row tuples (ts, dur, then int fields) to int64 columns, times as nanoseconds."""
    if not rows:
        return {name: np.zeros(0, dtype=np.int64) for name in ("start", "end", *names)}
    fields = list(zip(*rows))
    try:
        ts = np.array(fields[0], dtype=np.float64)
        dur = np.array(fields[1], dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{path}: an event has a non-numeric ts or dur") from None
    if np.isnan(ts).any() or np.isnan(dur).any():
        raise InputError(f"{path}: an event has no ts or dur")
    if (dur < 0).any():
        raise InputError(f"{path}: {int((dur < 0).sum())} events with negative duration")
    start = np.rint((ts - base_us) * 1000.0).astype(np.int64) + base_us * 1000
    out = {"start": start, "end": start + np.rint(dur * 1000.0).astype(np.int64)}
    out.update({name: np.array(fields[i + 2], dtype=np.int64) for i, name in enumerate(names)})
    return out


def _base_us(path: Path, router: _Router) -> int:
    """The earliest timestamp, whole microseconds: subtracted before scaling to keep precision."""
    try:
        return math.floor(
            min(r[0] for rows in (router.kernels, router.copies, router.runtime, router.ranges) for r in rows)
        )
    except TypeError:
        raise InputError(f"{path}: an event has a missing or non-numeric ts") from None


def read_kineto(path: str | Path) -> RankTrace:
    path = Path(path)
    data = read_bytes(path)
    if not data.strip():
        raise InputError(f"{path}: file is empty")
    document, router = _route_events(path, data)
    del data
    if router.empty():
        raise InputError(f"{path}: no kernel, copy, runtime or annotation events (not a GPU profiler trace?)")
    base_us = _base_us(path, router)
    notes: list[str] = []
    rank = _rank(path, document, notes)

    kcols = _columns(
        path,
        router.kernels,
        ("name", "device", "stream", "correlation", "grid", "block", "registers", "shared_mem", "msg_bytes"),
        base_us,
    )
    kcols["name"] = kcols["name"].astype(np.int32)
    ccols = _columns(path, router.copies, ("name", "device", "stream", "correlation", "bytes"), base_us)
    ccols["name"] = ccols["name"].astype(np.int32)
    copy_kinds = np.array([copy_kind(s) for s in router.strings], dtype=np.int8)
    ccols["kind"] = copy_kinds[ccols["name"]] if len(ccols["name"]) else np.zeros(0, np.int8)
    rcols = _columns(path, router.runtime, ("name", "pid", "tid", "correlation"), base_us)
    rcols["name"] = rcols["name"].astype(np.int32)
    kinds = np.array([runtime_kind(s) for s in router.strings], dtype=np.int8)
    rcols["kind"] = kinds[rcols["name"]] if len(rcols["name"]) else np.zeros(0, np.int8)
    gcols = _columns(path, router.ranges, ("name", "pid", "tid"), base_us)
    gcols["name"] = gcols["name"].astype(np.int32)

    device = _device(document, kcols["device"])
    if router.syncs:
        notes.append(f"{router.syncs} cuda_sync events seen; host syncs are taken from runtime calls")
    if not router.kernels:
        notes.append("no kernel events")
    base_ns = document.get("baseTimeNanoseconds")
    return RankTrace(
        source=str(path),
        rank=rank,
        strings=router.strings,
        kernels=Table(kcols),
        copies=Table(ccols),
        runtime=Table(rcols),
        ranges=Table(gcols),
        clock_offset_ns=int(base_ns) if isinstance(base_ns, int) else 0,
        device_sm_count=device.get("numSms"),
        device_name=device.get("name"),
        notes=notes,
        shapes=_shapes(path, router.matmuls, base_us),
        python_calls=_call_starts(router.python_calls, base_us),
    )


def _call_starts(ts_us: array, base_us: int) -> np.ndarray:
    """Sorted start times in ns, computed as the other columns are (offset first, for precision)."""
    ts = np.frombuffer(ts_us, dtype=np.float64) if len(ts_us) else np.zeros(0)
    return np.sort(np.rint((ts - base_us) * 1000.0).astype(np.int64) + base_us * 1000)


def _shapes(path: Path, matmuls: list[tuple], base_us: int) -> Table:
    """FLOPs and bytes of the matmul ops whose input shapes were recorded."""
    cols = _columns(path, [(ts, dur, tid) for ts, dur, tid, *_ in matmuls], ("tid",), base_us)
    dtypes = list(DType)
    cols["flops"] = np.array([m[3] for m in matmuls], dtype=np.float64)
    cols["bytes"] = np.array([m[4] for m in matmuls], dtype=np.float64)
    cols["dtype"] = np.array([dtypes.index(m[5]) for m in matmuls], dtype=np.int8)
    return Table(cols)


def _rank(path: Path, document: dict, notes: list[str]) -> int:
    info = document.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    match = _RANK_IN_NAME.search(path.name)
    if match:
        notes.append(f"rank {match.group(1)} taken from the file name (no distributedInfo.rank)")
        return int(match.group(1))
    notes.append("no distributedInfo.rank: assumed rank 0")
    return 0


def _device(document: dict, devices: np.ndarray) -> dict:
    """Properties of the GPU this rank's kernels ran on (the most used device id)."""
    props = document.get("deviceProperties")
    if not isinstance(props, list) or not props:
        return {}
    wanted = int(np.bincount(devices[devices >= 0]).argmax()) if (devices >= 0).any() else 0
    return next(
        (p for p in props if isinstance(p, dict) and p.get("id") == wanted),
        props[0] if isinstance(props[0], dict) else {},
    )


PARALLEL_FROM_BYTES = 16 << 20  # below this, starting worker processes costs more than it saves


def read_kineto_many(paths: list[Path], workers: int | None = None) -> list[RankTrace]:
    """Read ranks in parallel processes (one per core at most); one rank per file, ranks unique."""
    if workers is None and sum(p.stat().st_size for p in paths if p.exists()) < PARALLEL_FROM_BYTES:
        workers = 1
    workers = max(1, min(len(paths), workers or os.cpu_count() or 1))
    if workers == 1:
        traces = [read_kineto(p) for p in paths]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            traces = list(pool.map(read_kineto, paths))
    seen: dict[int, str] = {}
    for trace in traces:
        if trace.rank in seen:
            raise InputError(f"{trace.source}: rank {trace.rank} already read from {seen[trace.rank]}")
        seen[trace.rank] = trace.source
    return sorted(traces, key=lambda t: t.rank)
