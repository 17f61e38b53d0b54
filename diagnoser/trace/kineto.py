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
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import orjson

from diagnoser.errors import InputError
from diagnoser.models.precision import DType
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
    if not data.strip():
        raise InputError(f"{path}: file is empty")
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None
    if isinstance(document, list):  # the Chrome format also allows a bare event array
        document = {"traceEvents": document}
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise InputError(f"{path}: not a Chrome/Kineto trace (no traceEvents list)")
    return document


class _Interner:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.strings: list[str] = []

    def ids(self, names: list[str]) -> np.ndarray:
        index, strings = self.index, self.strings
        out = np.empty(len(names), dtype=np.int32)
        for i, name in enumerate(names):
            found = index.get(name)
            if found is None:
                found = index[name] = len(strings)
                strings.append(name)
            out[i] = found
        return out


def _times(path: Path, events: list[dict], base_us: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        ts = np.fromiter((e["ts"] for e in events), dtype=np.float64, count=len(events))
        dur = np.fromiter((e.get("dur", 0) for e in events), dtype=np.float64, count=len(events))
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{path}: an event has a missing or non-numeric ts/dur") from None
    if len(dur) and (dur < 0).any():
        bad = events[int(np.argmax(dur < 0))]
        raise InputError(f"{path}: {int((dur < 0).sum())} events with negative duration (first: {bad.get('name')!r})")
    start = np.rint((ts - base_us) * 1000.0).astype(np.int64) + base_us * 1000
    return start, start + np.rint(dur * 1000.0).astype(np.int64)


def _arg_ints(args: list[dict], key: str, default: int = -1) -> np.ndarray:
    def value(a: dict) -> int:
        v = a.get(key, default)
        return int(v) if isinstance(v, (int, float)) else default

    return np.fromiter((value(a) for a in args), dtype=np.int64, count=len(args))


def _dims_product(args: list[dict], key: str) -> np.ndarray:
    def product(a: dict) -> int:
        dims = a.get(key)
        if not isinstance(dims, list) or not dims:
            return -1
        out = 1
        for d in dims:
            out *= int(d)
        return out

    return np.fromiter((product(a) for a in args), dtype=np.int64, count=len(args))


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


def read_kineto(path: str | Path) -> RankTrace:
    path = Path(path)
    document = _parse(path, read_bytes(path))
    buckets: dict[str, list[dict]] = {"kernels": [], "copies": [], "runtime": [], "ranges": []}
    matmuls: list[dict] = []
    route = {cat: buckets["kernels"] for cat in _KERNEL_CATS}
    route.update({cat: buckets["copies"] for cat in _COPY_CATS})
    route.update({cat: buckets["runtime"] for cat in _RUNTIME_CATS})
    route.update({cat: buckets["ranges"] for cat in _RANGE_CATS})
    syncs = 0
    for event in document["traceEvents"]:
        if not isinstance(event, dict):
            raise InputError(f"{path}: traceEvents holds a non-object entry")
        if event.get("ph") != "X":
            continue
        cat = event.get("cat")
        sink = route.get(cat)
        if sink is not None:
            sink.append(event)
        elif cat == "cpu_op":
            if event.get("name") in MATMUL_OPS:
                matmuls.append(event)
        elif cat == "cuda_sync":
            syncs += 1

    every = [e for bucket in buckets.values() for e in bucket]
    if not every:
        raise InputError(f"{path}: no kernel, copy, runtime or annotation events (not a GPU profiler trace?)")
    try:
        base_us = int(math.floor(min(e["ts"] for e in every)))
    except (KeyError, TypeError):
        raise InputError(f"{path}: an event has a missing or non-numeric ts") from None

    names = _Interner()
    notes: list[str] = []
    rank = _rank(path, document, notes)

    def common(events: list[dict]) -> tuple[dict[str, np.ndarray], list[dict]]:
        start, end = _times(path, events, base_us)
        args = [e.get("args") or {} for e in events]
        return {"start": start, "end": end, "name": names.ids([str(e.get("name", "")) for e in events])}, args

    kcols, kargs = common(buckets["kernels"])
    kcols.update(
        device=_arg_ints(kargs, "device", 0),
        stream=_arg_ints(kargs, "stream"),
        correlation=_arg_ints(kargs, "correlation"),
        grid=_dims_product(kargs, "grid"),
        block=_dims_product(kargs, "block"),
        registers=_arg_ints(kargs, "registers per thread"),
        shared_mem=_arg_ints(kargs, "shared memory"),
    )
    ccols, cargs = common(buckets["copies"])
    copy_kinds = np.array([copy_kind(str(e.get("name", ""))) for e in buckets["copies"]], dtype=np.int8)
    ccols.update(
        kind=copy_kinds,
        bytes=_arg_ints(cargs, "bytes", 0),
        device=_arg_ints(cargs, "device", 0),
        stream=_arg_ints(cargs, "stream"),
        correlation=_arg_ints(cargs, "correlation"),
    )
    rcols, rargs = common(buckets["runtime"])
    kinds = np.array([runtime_kind(s) for s in names.strings], dtype=np.int8)
    rcols.update(
        kind=kinds[rcols["name"]] if len(rcols["name"]) else np.zeros(0, np.int8),
        pid=np.fromiter((_int(e.get("pid")) for e in buckets["runtime"]), np.int64, len(buckets["runtime"])),
        tid=np.fromiter((_int(e.get("tid")) for e in buckets["runtime"]), np.int64, len(buckets["runtime"])),
        correlation=_arg_ints(rargs, "correlation"),
    )
    gcols, _ = common(buckets["ranges"])
    gcols.update(
        pid=np.fromiter((_int(e.get("pid")) for e in buckets["ranges"]), np.int64, len(buckets["ranges"])),
        tid=np.fromiter((_int(e.get("tid")) for e in buckets["ranges"]), np.int64, len(buckets["ranges"])),
    )

    device = _device(document, kcols["device"])
    if syncs:
        notes.append(f"{syncs} cuda_sync events seen; host syncs are taken from runtime calls")
    if not buckets["kernels"]:
        notes.append("no kernel events")
    base_ns = document.get("baseTimeNanoseconds")
    return RankTrace(
        source=str(path),
        rank=rank,
        strings=names.strings,
        kernels=Table(kcols),
        copies=Table(ccols),
        runtime=Table(rcols),
        ranges=Table(gcols),
        clock_offset_ns=int(base_ns) if isinstance(base_ns, int) else 0,
        device_sm_count=device.get("numSms"),
        device_name=device.get("name"),
        notes=notes,
        shapes=_shapes(path, matmuls, base_us),
    )


def _shapes(path: Path, matmuls: list[dict], base_us: int) -> Table:
    """FLOPs and bytes of the matmul ops whose input shapes were recorded."""
    dtypes = list(DType)
    priced = []
    for event in matmuls:
        args = event.get("args") or {}
        cost = matmul_cost(event["name"], args.get("Input Dims") or [], args.get("Input type") or [])
        if cost is not None:
            priced.append((event, cost))
    start, end = _times(path, [e for e, _ in priced], base_us)
    return Table(
        {
            "start": start,
            "end": end,
            "tid": np.array([_int(e.get("tid")) for e, _ in priced], dtype=np.int64),
            "flops": np.array([c[0] for _, c in priced], dtype=np.float64),
            "bytes": np.array([c[1] for _, c in priced], dtype=np.float64),
            "dtype": np.array([dtypes.index(c[2]) for _, c in priced], dtype=np.int8),
        }
    )


def _int(value: object) -> int:
    """pid/tid are ints in Kineto, except on synthetic rows ("Spans"); those map to -1."""
    return int(value) if isinstance(value, (int, float)) else -1


def _device(document: dict, devices: np.ndarray) -> dict:
    """Properties of the GPU this rank's kernels ran on (the most used device id)."""
    props = document.get("deviceProperties")
    if not isinstance(props, list) or not props:
        return {}
    wanted = int(np.bincount(devices[devices >= 0]).argmax()) if (devices >= 0).any() else 0
    return next((p for p in props if isinstance(p, dict) and p.get("id") == wanted), props[0] if isinstance(props[0], dict) else {})


def read_kineto_many(paths: list[Path], workers: int | None = None) -> list[RankTrace]:
    """Read ranks in parallel processes (one per core at most); one rank per file, ranks unique."""
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
