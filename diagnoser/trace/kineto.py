"""PyTorch profiler (Kineto) Chrome-trace JSON into the columnar model.

    read_kineto(path) -> RankTrace          one .json / .json.gz file
    read_kineto_many(paths, memory=None) -> list[RankTrace]   several ranks, parsed in parallel processes
                                                 under one memory budget; of several files, those
                                                 with no work are skipped

The whole document is decompressed in one streamed pass and parsed by orjson (the fastest
JSON parser available to us); events are then bucketed by category once and each column is
built by one comprehension, so no per-event Python object outlives the read. Events we do
not use (python_function, cpu_op, flows) are skipped on their category alone.

Kineto writes microseconds (ints or floats); we keep int64 nanoseconds, subtracting a base
before scaling so epoch-microsecond timestamps (1.7e15) keep their precision.

What a real capture cannot hold is refused in one line naming the file and the event: a
timestamp beyond ±2**62 ns, a negative duration, an event that ends more than a day
(``model.MAX_CAPTURE_NS``) after the capture's first event (``dur: 1e300`` included), an
integer field beyond 64 bits, a field of the wrong type. What a capture can plausibly hold is
kept and said in the notes: events without ``ts`` or ``dur`` are left out (a writer cut short),
events identical to an earlier one are dropped (a buffer flushed twice; Python-call events,
which carry only a start, are counted as written), a malformed ``deviceProperties`` leaves the
GPU unknown. Traces of other devices than CUDA/ROCm GPUs (MTIA, HPU, XPU: their own event
categories, or MTIA ``deviceProperties``) are refused: their kernels are not what we model.
"""

from __future__ import annotations

import math
import os
import re
from array import array
from pathlib import Path

import numpy as np
import orjson

from diagnoser.errors import InputError
from diagnoser.models.precision import DType
from diagnoser.trace.chunked_json import NotSplittable, Part, PartReader, array_parts, event_pieces
from diagnoser.trace.collector import without_cycle_collection
from diagnoser.trace.memory_budget import DEFAULT_MEMORY, parse_size, part_count, read_plan
from diagnoser.trace.model import MAX_CAPTURE_NS, MAX_CLOCK_NS, CopyKind, RankTrace, RuntimeKind, Table, append_narrow, as_numpy
from diagnoser.trace.roofline import MATMUL_OPS, matmul_cost
from diagnoser.trace.trace_file import is_gzip, open_stream, read_bytes

_KERNEL_CATS = {"kernel", "Kernel"}
_COPY_CATS = {"gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
_RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver", "Driver"}
_RANGE_CATS = {"user_annotation"}
_KIND_OF_CAT = {
    **dict.fromkeys(_RUNTIME_CATS, "runtime"), **dict.fromkeys(_KERNEL_CATS, "kernels"),
    **dict.fromkeys(_COPY_CATS, "copies"), **dict.fromkeys(_RANGE_CATS, "ranges"),
}
_DEVICE_KINDS = ("kernels", "copies")  # their first event shows the CPU ops are not the device work
# Kineto categories of devices other than CUDA/ROCm GPUs (libkineto ActivityType names).
_OTHER_DEVICE_CATS = {
    **dict.fromkeys(("mtia_runtime", "mtia_ccp_events", "mtia_insight", "mtia_workloadd", "mtia_counters"), "MTIA"),
    **dict.fromkeys(("xpu_runtime", "xpu_driver"), "XPU"),
    "hpu_op": "HPU",
    **dict.fromkeys(("gcu_runtime", "gcu_driver", "gcu_sync", "gcu_profiler_range"), "GCU"),
    "glow_runtime": "Glow",
    **dict.fromkeys(("privateuse1_runtime", "privateuse1_driver"), "PrivateUse1"),
}
_MAX_TS_US = MAX_CLOCK_NS / 1000
_MAX_CAPTURE_US = MAX_CAPTURE_NS / 1000
_MAX_SMS = 10_000  # a B200 has 148; anything past this is not a GPU's SM count

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
    if type(value) is int:  # nearly every field: millions of calls, so the common case goes first
        return value
    return int(value) if isinstance(value, (int, float)) else default


# Bytes per element of the ScalarType names PyTorch writes as a collective's "dtype".
_ELEMENT_BYTES = {
    "Float": 4, "Float32": 4, "Int": 4, "Int32": 4,
    "BFloat16": 2, "Half": 2, "Float16": 2,
    "Byte": 1, "Char": 1, "Bool": 1,
    "Long": 8, "Int64": 8, "Double": 8,
}  # fmt: skip
_MSG_IN, _MSG_OUT = "In msg nelems", "Out msg nelems"
_DTYPE_INDEX = {dtype: index for index, dtype in enumerate(DType)}


def _msg_bytes(args: dict) -> int:
    """A collective's message size in bytes, 0 when unknown (no size args, odd values, unknown dtype).

    The larger of the input and output buffers: the whole gathered output of an all-gather,
    the whole input of a reduce-scatter, which is the "size" nccl-tests reports against.
    """
    dtype = args.get("dtype")
    if not isinstance(dtype, str):
        return 0
    size = 1 if dtype.startswith("Float8") else _ELEMENT_BYTES.get(dtype, 0)
    counts = [args[k] for k in (_MSG_IN, _MSG_OUT) if k in args]
    if not counts or not size or not all(type(n) in (int, float) and 0 <= n < 2**53 for n in counts):
        return 0
    return int(max(counts)) * size


def _dims(value: object) -> int:
    """Product of a [x, y, z] launch dimension, -1 when absent."""
    if type(value) is list and len(value) == 3 and type(value[0]) is type(value[1]) is type(value[2]) is int:
        return value[0] * value[1] * value[2]  # as Kineto writes it: skip the general loop
    if not isinstance(value, list) or not value:
        return -1
    out = 1
    for d in value:
        out *= _num(d, 1)
    return out


def _position(events: list, event: object) -> int:
    return next(i for i, e in enumerate(events) if e is event)


def _ints(values: list, default: int) -> np.ndarray:
    """An int64 column of fields read as ``_num`` reads each: one numpy conversion when all are
    integers (nearly always), the per-value rule only when some are not. May raise OverflowError."""
    try:
        fast = np.array(values)
    except (ValueError, TypeError):  # lists of several lengths
        fast = None
    if fast is not None and fast.dtype == np.int64 and fast.ndim == 1:
        return fast
    return np.array([_num(v, default) for v in values], dtype=np.int64)


_SAFE_DIM = 2**21  # three factors under this in magnitude multiply without leaving int64


def _all_dims(values: list) -> list | np.ndarray:
    """``_dims`` of each value; one numpy product when all are [x, y, z] of small integers."""
    try:
        triples = np.array(values)
    except (ValueError, TypeError):
        triples = None
    if (triples is not None and triples.dtype == np.int64 and triples.shape == (len(values), 3)
            and triples.min() > -_SAFE_DIM and triples.max() < _SAFE_DIM):
        return triples[:, 0] * triples[:, 1] * triples[:, 2]
    return [_dims(v) for v in values]


# kernel fields kept in the narrowest integer type that holds them (``model.narrowest``), widened as read
_NARROW_FIELDS = {"kernels": ("device", "stream", "correlation", "grid", "block", "registers", "shared_mem", "msg_bytes")}


class _Columns:
    """One kind of event as growing arrays, each piece appended as it is read: 8 bytes a field, where
    a row of Python objects costs dozens. One array per field, grown in place, rather than a block
    per piece joined at the end: the freed blocks would stay in the process as holes in the heap
    (110 of 250 MB after reading 10^6 kernels) and the join would hold every field twice."""

    def __init__(self, path: Path, kind: str, strings: list[str]) -> None:
        self.path, self.kind, self.strings = path, kind, strings
        floats = ("ts", "dur", *_FLOAT_FIELDS.get(kind, ()))
        self.narrow = _NARROW_FIELDS.get(kind, ())
        self.fields = {
            name: array("d" if name in floats else "i" if name == "name" else "b" if name in self.narrow else "q")
            for name in ("ts", "dur", *_FIELDS[kind])
        }

    def add(self, ts: list, dur: list, fields: dict[str, list]) -> None:
        """One piece's events: ts and dur as written (None where missing), the other fields as read."""
        names = fields["name"]
        try:
            ts_us, dur_us = np.array(ts, dtype=np.float64), np.array(dur, dtype=np.float64)  # JSON has no NaN: None is one
        except (TypeError, ValueError):
            bad = next(i for i, v in enumerate(zip(ts, dur)) if not all(x is None or isinstance(x, (int, float)) for x in v))
            raise InputError(f"{self.path}: {_event_text(self.kind, self.strings, names[bad], ts[bad])} has a non-numeric ts or dur") from None
        floats = _FLOAT_FIELDS.get(self.kind, ())
        columns = {"ts": ts_us, "dur": dur_us}
        for name, values in fields.items():
            try:
                column = (np.array(values, dtype=np.float64) if name in floats
                          else np.array(values, dtype=np.int32) if name == "name" else _ints(values, _DEFAULTS.get(name, -1)))
            except OverflowError:
                read = [_num(v, _DEFAULTS.get(name, -1)) for v in values]
                bad = next(i for i, v in enumerate(read) if not -(2**63) <= v < 2**63)
                raise InputError(
                    f"{self.path}: {_event_text(self.kind, self.strings, names[bad], ts[bad])}: {name} {_short(read[bad])} "
                    "is beyond 64-bit integers"
                ) from None
            columns[name] = column
        for name, column in columns.items():  # appended only once every field reads
            values = self.fields[name]
            if name in self.narrow:  # widened when a piece holds a value its type cannot
                self.fields[name] = append_narrow(values, column)
            else:
                values.frombytes(memoryview(column).cast("B"))

    def absorb(self, other: _Columns, names: np.ndarray) -> None:
        """``other``'s rows after these, its name ids mapped to this reader's by ``names``."""
        for name, values in other.fields.items():
            column = as_numpy(values)
            if name == "name" and len(column):
                column = names[column]
            if name in self.narrow:
                self.fields[name] = append_narrow(self.fields[name], column)
            else:
                self.fields[name].frombytes(memoryview(np.ascontiguousarray(column, dtype=column.dtype)).cast("B"))

    def read(self) -> bool:
        return len(self.fields["ts"]) > 0

    def arrays(self) -> dict[str, np.ndarray] | None:
        """The whole columns (views of the arrays, no copy), None when no event of this kind was read."""
        if not self.read():
            return None
        return {name: as_numpy(values) for name, values in self.fields.items()}


class _Router:
    """Turns each piece of events into columns at once and drops the event dicts.

    Only what the analysis reads survives (no Python stack frames, CPU ops or flow arrows): a
    piece's events are sorted by kind in one pass, and each field of a kind is then read by one
    comprehension over that kind's events, so no Python object per kept event outlives the piece.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name_index: dict[str, int] = {}
        self.strings: list[str] = []
        self.columns = {kind: _Columns(path, kind, self.strings) for kind in _FIELDS}
        self.python_calls = array("d")  # 8 bytes a call: with_stack traces hold millions of them
        # every CPU op, compactly, until the first GPU event shows they are not the device work
        self.cpu_ops: tuple[array, ...] | None = (array("d"), array("d"), array("q"), array("q"))
        self.syncs = 0
        self.seen = 0  # events in the pieces before this one: positions in messages are of the whole array

    def _name(self, event: dict) -> int:
        return self._intern(event.get("name", ""))

    def _intern(self, name: object) -> int:
        """A name's id, in the order names are first met; keyed by the name as written (a number stays one)."""
        found = self.name_index.get(name)
        if found is None:
            found = self.name_index[name] = len(self.strings)
            self.strings.append(str(name))
        return found

    def _add(self, kind: str, events: list[dict]) -> None:
        """Each field of ``events``, all of one kind, read by one comprehension; names are interned already."""
        index = self.name_index
        fields: dict[str, list] = {"name": [index[e.get("name", "")] for e in events]}
        if kind in ("runtime", "ranges"):
            fields["pid"] = [e.get("pid") for e in events]
            fields["tid"] = [e.get("tid") for e in events]
        if kind in ("kernels", "copies", "runtime"):
            args = [e.get("args") or {} for e in events]
            if kind != "runtime":
                fields["device"] = [a.get("device") for a in args]
                fields["stream"] = [a.get("stream") for a in args]
            fields["correlation"] = [a.get("correlation") for a in args]
            if kind == "kernels":
                fields["grid"] = _all_dims([a.get("grid") for a in args])
                fields["block"] = _all_dims([a.get("block") for a in args])
                fields["registers"] = [a.get("registers per thread") for a in args]
                fields["shared_mem"] = [a.get("shared memory") for a in args]
                # only collectives carry sizes: other kernels skip the call
                fields["msg_bytes"] = [_msg_bytes(a) if _MSG_IN in a or _MSG_OUT in a else 0 for a in args]
            elif kind == "copies":
                fields["bytes"] = [a.get("bytes") for a in args]
        self.columns[kind].add([e.get("ts") for e in events], [e.get("dur") for e in events], fields)

    def _add_matmuls(self, priced: list[tuple[dict, tuple]]) -> None:
        fields = {
            "name": [self.name_index[e.get("name", "")] for e, _ in priced],
            "tid": [e.get("tid") for e, _ in priced],
            "flops": [cost[0] for _, cost in priced],
            "bytes": [cost[1] for _, cost in priced],
            "dtype": [_DTYPE_INDEX[cost[2]] for _, cost in priced],
        }
        self.columns["shapes"].add([e.get("ts") for e, _ in priced], [e.get("dur") for e, _ in priced], fields)

    def consume(self, events: list) -> None:
        event: object = None
        found: dict[str, list[dict]] = {"kernels": [], "copies": [], "runtime": [], "ranges": []}
        priced: list[tuple[dict, tuple]] = []
        index = self.name_index
        try:
            for event in events:
                if event.get("ph") != "X":
                    continue
                cat = event.get("cat")
                kind = _KIND_OF_CAT.get(cat)
                if kind is not None:
                    found[kind].append(event)
                    if kind in _DEVICE_KINDS:
                        self.cpu_ops = None
                    if event.get("name", "") not in index:  # interned in the order written, as every name is
                        self._name(event)
                elif cat == "cpu_op":
                    if self.cpu_ops is not None:
                        _keep_cpu_op(self.cpu_ops, event, self._name)
                    if event.get("name") in MATMUL_OPS:
                        args = event.get("args") or {}
                        cost = matmul_cost(event["name"], args.get("Input Dims") or [], args.get("Input type") or [])
                        if cost is not None:
                            self._name(event)
                            priced.append((event, cost))
                elif cat == "cuda_sync":
                    self.syncs += 1
                elif cat == "python_function" and isinstance(event.get("ts"), (int, float)):
                    self.python_calls.append(event["ts"])
                elif cat in _OTHER_DEVICE_CATS:
                    raise InputError(
                        f"{self.path}: device type not supported: {_OTHER_DEVICE_CATS[cat]} events (category {cat!r}, "
                        f"traceEvents[{self.seen + _position(events, event)}]); diagnoser reads CUDA and ROCm GPU traces"
                    )
            for kind, of_kind in found.items():
                if not of_kind:
                    continue
                try:
                    self._add(kind, of_kind)
                except (AttributeError, TypeError):
                    for event in of_kind:  # one at a time, to name the event that cannot be read
                        self._add(kind, [event])
                    raise
            if priced:
                self._add_matmuls(priced)
        except AttributeError:  # an entry that is not an object, or whose args are not one
            where = f"traceEvents[{self.seen + _position(events, event)}]"
            if not isinstance(event, dict):
                raise InputError(f"{self.path}: not a Chrome/Kineto trace ({where} is not an object)") from None
            raise InputError(f"{self.path}: {where}: args is not an object") from None
        except TypeError as err:  # a list or object where a name or category belongs
            where = f"traceEvents[{self.seen + _position(events, event)}]"
            raise InputError(f"{self.path}: {where} has a field of the wrong type ({err})") from None
        self.seen += len(events)

    def empty(self) -> bool:
        return not any(self.columns[kind].read() for kind in ("kernels", "copies", "runtime", "ranges"))

    def absorb(self, other: _Router) -> None:
        """The events ``other`` read from the part of the file after this reader's, as if read on: its names
        interned after these, its CPU ops kept only while no part so far has shown device work."""
        names = np.zeros(len(other.strings), dtype=np.int32)
        for name, at in other.name_index.items():
            names[at] = self._intern(name)
        for kind, columns in self.columns.items():
            columns.absorb(other.columns[kind], names)
        self.python_calls.extend(other.python_calls)
        if self.cpu_ops is None or other.cpu_ops is None:
            self.cpu_ops = None
        else:
            ts, dur, name, tid = other.cpu_ops
            self.cpu_ops[0].extend(ts)
            self.cpu_ops[1].extend(dur)
            self.cpu_ops[2].frombytes(names[np.frombuffer(name, dtype=np.int64)].astype(np.int64).tobytes())
            self.cpu_ops[3].extend(tid)
        self.syncs += other.syncs
        self.seen += other.seen


def _route_part(path: Path, part: Part) -> tuple[dict | None, _Router] | None:
    """One part of the file's events through a reader of its own (in a worker process); None when the part
    cannot be read as cut, or holds what only the whole file's reading can name exactly (an error)."""
    router = _Router(path)
    document = None
    try:
        with open(path, "rb") as handle:
            for document, events in event_pieces(PartReader(handle, part), part=part):
                router.consume(events)
    except (NotSplittable, InputError):
        return None
    return document, router


def _route_in_parts(path: Path, workers: int) -> tuple[dict, _Router] | None:
    """The file's event array cut into ``workers`` parts, each read in its own process and joined in order: the same
    reading as one pass, on several cores. None when the file cannot be cut (compressed, no array found, a cut that
    does not parse) or any part holds an error: the one pass then reads it, and names the error exactly."""
    from concurrent.futures import ProcessPoolExecutor  # here: most traces are read in one process, without it

    try:
        if is_gzip(path):
            return None
        parts = array_parts(path, workers)
    except (NotSplittable, OSError):
        return None
    if len(parts) < 2:
        return None
    with ProcessPoolExecutor(max_workers=len(parts)) as pool:
        read = list(pool.map(_route_part, [path] * len(parts), parts))
    if any(r is None for r in read):
        return None
    document, router = read[-1][0], read[0][1]
    for _, later in read[1:]:
        router.absorb(later)
    return document, router


def _route_events(path: Path, workers: int = 1) -> tuple[dict, _Router]:
    """Stream the file through in pieces when its bytes allow it (memory holds a piece, not the
    file), in parts on ``workers`` cores when it is large and plain; else read and parse it whole."""
    if workers > 1 and (routed := _route_in_parts(path, workers)) is not None:
        return routed
    router = _Router(path)
    try:
        with open_stream(path) as stream:
            for document, events in event_pieces(stream):
                router.consume(events)
        return document, router
    except NotSplittable:
        pass
    data = read_bytes(path)
    if not data.strip():
        raise InputError(f"{path}: file is empty")
    router = _Router(path)
    document = _parse(path, data)
    del data
    router.consume(document["traceEvents"])
    return document, router


# The columns each kind of row holds after (ts, dur); "shapes" are the priced matmul ops.
_FIELDS = {
    "kernels": ("name", "device", "stream", "correlation", "grid", "block", "registers", "shared_mem", "msg_bytes"),
    "copies": ("name", "device", "stream", "correlation", "bytes"),
    "runtime": ("name", "pid", "tid", "correlation"),
    "ranges": ("name", "pid", "tid"),
    "shapes": ("name", "tid", "flops", "bytes", "dtype"),
}
_FLOAT_FIELDS = {"shapes": ("flops", "bytes")}
_DEFAULTS = {"device": 0, "bytes": 0}  # what an absent integer field reads as; -1 for the others
_WHAT = {"kernels": "kernel", "copies": "copy", "runtime": "runtime call", "ranges": "annotation", "shapes": "matmul op"}
_WHAT_PLURAL = {"kernels": "kernels", "copies": "copies", "runtime": "runtime calls", "ranges": "annotations",
                "shapes": "matmul ops"}


def _event_text(kind: str, strings: list[str], name: int, ts: object) -> str:
    text = strings[name]
    text = text if len(text) <= 60 else text[:57] + "..."
    at = f" at ts {ts:.16g} µs" if isinstance(ts, (int, float)) else ""
    return f"{_WHAT[kind]} event {text!r}{at}"


class _Events:
    """One kind of row as columns, times still in microseconds as written, for checking before scaling."""

    def __init__(self, path: Path, kind: str, columns: dict[str, np.ndarray] | None, strings: list[str]) -> None:
        self.path, self.kind, self.strings = path, kind, strings
        if columns is None:
            self.ts = self.dur = np.zeros(0)
            self.cols = {name: np.zeros(0, dtype=np.int64) for name in _FIELDS[kind]}
            self.missing = 0
            return
        ts, dur = columns.pop("ts"), columns.pop("dur")
        self.cols = columns
        # JSON has no NaN: a non-finite value here is a missing (None) ts or dur
        written = np.isfinite(ts) & np.isfinite(dur)
        self.missing = len(ts) - int(np.count_nonzero(written))
        if self.missing:
            ts, dur = ts[written], dur[written]
            self.cols = {name: col[written] for name, col in self.cols.items()}
        self.ts, self.dur = ts, dur

    def event(self, row: int) -> str:
        return _event_text(self.kind, self.strings, int(self.cols["name"][row]), float(self.ts[row]))

    def check(self, base_us: float) -> None:
        """Refuse negative durations and anything more than a capture's length from its first event."""
        if not len(self.ts):
            return
        negative = np.flatnonzero(self.dur < 0)
        if len(negative):
            raise InputError(
                f"{self.path}: {len(negative)} event(s) with negative duration (first: {self.event(negative[0])}, "
                f"dur {self.dur[negative[0]]:g} µs)"
            )
        with np.errstate(over="ignore", invalid="ignore"):
            far = (self.dur > _MAX_CAPTURE_US) | (np.abs(self.ts - base_us) > _MAX_CAPTURE_US)
            far |= self.ts + self.dur - base_us > _MAX_CAPTURE_US
        if far.any():
            row = int(np.flatnonzero(far)[0])
            raise InputError(
                f"{self.path}: {self.event(row)} with dur {self.dur[row]:.6g} µs lies beyond a capture's length "
                f"(refused: more than a day from the first event at {base_us:.16g} µs)"
            )

    def columns(self, base_us: int) -> dict[str, np.ndarray]:
        """int64 nanoseconds for start and end, computed from the offset to the base for precision."""
        start = self.ts - base_us  # in place from here: at 10^7 events each temporary is 80 MB
        start *= 1000.0
        start = np.rint(start, out=start).astype(np.int64)
        start += base_us * 1000
        end = self.dur * 1000.0
        end = np.rint(end, out=end).astype(np.int64)
        end += start
        return {"start": start, "end": end, **self.cols}


def _base_us(path: Path, timed: list[_Events]) -> int:
    """The earliest timestamp, whole microseconds: subtracted before scaling to keep precision."""
    firsts = [(float(e.ts.min()), e) for e in timed if len(e.ts)]
    if not firsts:
        raise InputError(f"{path}: no kernel, copy, runtime or annotation event has both a ts and a dur")
    first, owner = min(firsts, key=lambda item: item[0])
    if abs(first) > _MAX_TS_US:
        row = int(np.argmin(owner.ts))
        raise InputError(f"{path}: {owner.event(row)}: a timestamp beyond any clock (more than 2**62 ns from zero)")
    return math.floor(first)


class NothingRecorded(InputError):
    """A trace with none of the events analysed: vLLM's API server writes one beside each worker's."""


@without_cycle_collection
def read_kineto(path: str | Path, workers: int = 1) -> RankTrace:
    """One rank's trace; ``workers`` > 1 reads a large uncompressed file in that many parts at once."""
    path = Path(path)
    document, router = _route_events(path, workers)
    other = _other_device(document)
    if other:
        raise InputError(f"{path}: device type not supported: {other}; diagnoser reads CUDA and ROCm GPU traces")
    if router.empty():
        raise NothingRecorded(f"{path}: no kernel, copy, runtime or annotation events (not a GPU profiler trace?)")
    notes: list[str] = []
    rank = _rank(path, document, notes)
    no_kernels = not router.columns["kernels"].read()
    events = {}
    for kind in ("kernels", "copies", "runtime", "ranges", "shapes"):
        events[kind] = _Events(path, kind, router.columns[kind].arrays(), router.strings)
    base_us = _base_us(path, [e for kind, e in events.items() if kind != "shapes"])
    for e in events.values():
        e.check(base_us)
    tables: dict[str, Table] = {}
    dropped: dict[str, int] = {}
    missing = {kind: e.missing for kind, e in events.items()}
    for kind in list(events):
        cols = events.pop(kind).columns(base_us)  # a kind's µs columns go once its ns ones exist
        cols["name"] = cols["name"].astype(np.int32, copy=False)
        tables[kind], dropped[kind] = Table(cols).without_duplicates()
    _note_counts(notes, "had no ts or dur and were left out", missing)
    _note_counts(notes, "were exact copies of an earlier event and were dropped", dropped)

    copy_kinds = np.array([copy_kind(s) for s in router.strings], dtype=np.int8)
    copies = tables["copies"]
    copies.columns["kind"] = copy_kinds[copies["name"]] if len(copies) else np.zeros(0, np.int8)
    kinds = np.array([runtime_kind(s) for s in router.strings], dtype=np.int8)
    runtime = tables["runtime"]
    runtime.columns["kind"] = kinds[runtime["name"]] if len(runtime) else np.zeros(0, np.int8)

    device_name, sm_count = _device(document, tables["kernels"]["device"], notes)
    if router.syncs:
        notes.append(f"{router.syncs} cuda_sync events seen; host syncs are taken from runtime calls")
    if no_kernels:
        notes.append("no kernel events")
    return RankTrace(
        source=str(path),
        rank=rank,
        strings=router.strings,
        kernels=tables["kernels"],
        copies=copies,
        runtime=runtime,
        ranges=tables["ranges"],
        clock_offset_ns=_clock_offset(document, notes),
        device_sm_count=sm_count,
        device_name=device_name,
        notes=notes,
        shapes=_shapes(tables["shapes"]),
        python_calls=_call_starts(path, router.python_calls, base_us),
        cpu_ops=_cpu_ops(path, router.cpu_ops, base_us),
    )


def _note_counts(notes: list[str], what: str, counts: dict[str, int]) -> None:
    if any(counts.values()):
        detail = ", ".join(f"{n} {(_WHAT if n == 1 else _WHAT_PLURAL)[kind]}" for kind, n in counts.items() if n)
        notes.append(f"{sum(counts.values())} event(s) {what} ({detail})")


def _call_starts(path: Path, ts_us: array, base_us: int) -> np.ndarray:
    """Sorted start times in ns, computed as the other columns are (offset first, for precision)."""
    ts = np.frombuffer(ts_us, dtype=np.float64) if len(ts_us) else np.zeros(0)
    far = np.abs(ts - base_us) > _MAX_CAPTURE_US
    if far.any():
        raise InputError(
            f"{path}: a python_function event at ts {ts[far][0]:.16g} µs lies more than a day from the first event "
            f"at {base_us} µs (refused: beyond a capture's length)"
        )
    return np.sort(np.rint((ts - base_us) * 1000.0).astype(np.int64) + base_us * 1000)


def _keep_cpu_op(columns: tuple[array, ...], event: dict, name) -> None:
    ts, dur = event.get("ts"), event.get("dur")
    if isinstance(ts, (int, float)) and isinstance(dur, (int, float)) and dur >= 0:
        columns[0].append(ts)
        columns[1].append(dur)
        columns[2].append(name(event))
        tid = _num(event.get("tid"))
        columns[3].append(tid if -(2**63) <= tid < 2**63 else -1)  # a thread id no int64 holds is no thread


def _cpu_ops(path: Path, columns: tuple[array, ...] | None, base_us: int) -> Table:
    """The CPU ops of a trace with no GPU events, in ns as the other columns; empty otherwise."""
    if columns is None or not len(columns[0]):
        return Table()
    ts, dur = np.frombuffer(columns[0], dtype=np.float64), np.frombuffer(columns[1], dtype=np.float64)
    far = (np.abs(ts - base_us) > _MAX_CAPTURE_US) | (dur > _MAX_CAPTURE_US)
    if far.any():
        raise InputError(f"{path}: a cpu_op event at ts {ts[far][0]:.16g} µs lies beyond a capture's length from {base_us} µs")
    start = np.rint((ts - base_us) * 1000.0).astype(np.int64) + base_us * 1000
    return Table({
        "start": start,
        "end": start + np.rint(dur * 1000.0).astype(np.int64),
        "name": np.frombuffer(columns[2], dtype=np.int64).astype(np.int32),
        "tid": np.frombuffer(columns[3], dtype=np.int64).copy(),
    })


def _shapes(matmuls: Table) -> Table:
    """FLOPs and bytes of the matmul ops whose input shapes were recorded (their names are all matmuls)."""
    cols = dict(matmuls.columns)
    del cols["name"]
    cols["dtype"] = cols["dtype"].astype(np.int8)
    return Table(cols)


def _rank(path: Path, document: dict, notes: list[str]) -> int:
    info = document.get("distributedInfo")
    written = info.get("rank") if isinstance(info, dict) else None
    if type(written) is int and written >= 0:
        return written
    if written is not None:
        notes.append(f"distributedInfo.rank is {_short(written)}, not a rank number: ignored")
    match = _RANK_IN_NAME.search(path.name)
    if match:
        notes.append(f"rank {match.group(1)} taken from the file name (no distributedInfo.rank)")
        return int(match.group(1))
    notes.append("no distributedInfo.rank: assumed rank 0")
    return 0


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _clock_offset(document: dict, notes: list[str]) -> int:
    """baseTimeNanoseconds: the epoch of this rank's clock, which aligns ranks with each other."""
    base_ns = document.get("baseTimeNanoseconds")
    if base_ns is None:
        return 0
    if type(base_ns) is not int or abs(base_ns) > MAX_CLOCK_NS:
        notes.append(f"baseTimeNanoseconds is {_short(base_ns)}, not a clock in range: ignored")
        return 0
    return base_ns


def _other_device(document: dict) -> str | None:
    """What says this trace is of an MTIA rather than a GPU, from its metadata (None: nothing does).

    Kineto's MTIA profiler writes deviceProperties with runtime versions and no compute
    capability (every CUDA and ROCm entry has ``computeMajor``); HTA reads an ``mtia`` backend
    the same way.
    """
    props = document.get("deviceProperties")
    for i, entry in enumerate(props if isinstance(props, list) else ()):
        if isinstance(entry, dict) and "computeMajor" not in entry and "runtimeMajorVersion" in entry:
            return f"MTIA (deviceProperties[{i}] {_short(entry.get('name'))} has MTIA runtime versions, no CUDA compute capability)"
    info = document.get("distributedInfo")
    backend = info.get("backend") if isinstance(info, dict) else None
    if isinstance(backend, str) and "mtia" in backend.lower():
        return f"MTIA (distributedInfo.backend {backend!r})"
    return None


def _device(document: dict, devices: np.ndarray, notes: list[str]) -> tuple[str | None, int | None]:
    """Name and SM count of the GPU this rank's kernels ran on (the most used device id).

    A malformed entry leaves what it would have said unknown, in a note: a wrong SM count
    would mislabel every kernel as under-filled or not.
    """
    props = document.get("deviceProperties")
    if props is None:
        return None, None
    if not isinstance(props, list):
        notes.append(f"deviceProperties is a {type(props).__name__}, not a list: GPU name and SM count unknown")
        return None, None
    entries = [(i, p) for i, p in enumerate(props) if isinstance(p, dict)]
    if len(entries) < len(props):
        notes.append(f"{len(props) - len(entries)} deviceProperties entries are not objects: ignored")
    if not entries:
        return None, None
    used, counts = np.unique(devices[devices >= 0], return_counts=True)
    wanted = int(used[np.argmax(counts)]) if len(used) else 0
    i, entry = next(((i, p) for i, p in entries if p.get("id") == wanted), entries[0])
    name, sms = entry.get("name"), entry.get("numSms")
    if name is not None and not isinstance(name, str):
        notes.append(f"deviceProperties[{i}].name is {_short(name)}, not a string: GPU name unknown")
        name = None
    if sms is not None and not (type(sms) is int and 0 < sms <= _MAX_SMS):
        notes.append(f"deviceProperties[{i}].numSms is {_short(sms)}, not an SM count: SM count unknown")
        sms = None
    return name, sms


PARALLEL_FROM_BYTES = 16 << 20  # below this, starting worker processes costs more than it saves


def _read_if_any(path: Path) -> RankTrace | None:
    """The trace, or None when it recorded nothing at all."""
    try:
        return read_kineto(path)
    except NothingRecorded:
        return None


def _has_work(trace: RankTrace) -> bool:
    return bool(len(trace.kernels) or len(trace.copies) or len(trace.cpu_ops))


def _working(paths: list[Path], read: list[RankTrace | None]) -> list[RankTrace]:
    """The traces that hold work, the others named in a note of the first: a profiler folder holds
    the API server's near-empty trace beside each worker's, and it must not stop the workers' reading
    (nor, with no rank of its own, pass for rank 0)."""
    traces = [t for t in read if t is not None and _has_work(t)]
    if not traces:
        raise InputError(f"{', '.join(map(str, paths))}: no kernels, copies or CPU ops in any of these traces")
    traces[0].notes.extend(
        f"skipped {path}: no kernels, copies or CPU ops (vLLM's API server writes such a trace beside the worker's)"
        for path, trace in zip(paths, read)
        if trace is None or not _has_work(trace)
    )
    return traces


def read_kineto_many(paths: list[Path], workers: int | None = None, memory: int | None = None) -> list[RankTrace]:
    """Read ranks in parallel processes (one per core at most, as many as fit in ``memory`` bytes,
    see ``memory_budget``); one rank per file, ranks unique. A single file is read whatever it
    holds, so its own error says what it lacks."""
    budget = memory or parse_size(DEFAULT_MEMORY)
    if workers is None and sum(p.stat().st_size for p in paths if p.exists()) < PARALLEL_FROM_BYTES:
        workers = 1
    cpus = workers or os.cpu_count() or 1
    order, workers, notes = read_plan(paths, budget, cpus)
    if len(paths) < 2:
        parts, part_notes = part_count(paths[0], budget, cpus) if paths else (1, [])
        traces = [read_kineto(p, parts) for p in paths]
        traces[0].notes.extend([*notes, *part_notes])
        return traces
    read: list[RankTrace | None] = [None] * len(paths)
    if workers == 1:
        for i in order:
            read[i] = _read_if_any(paths[i])
    else:
        from concurrent.futures import ProcessPoolExecutor  # here: a small trace, read in-process, starts without it

        with ProcessPoolExecutor(max_workers=workers) as pool:
            for i, trace in zip(order, pool.map(_read_if_any, [paths[i] for i in order])):
                read[i] = trace
    traces = _working(paths, read)
    traces[0].notes.extend(notes)
    seen: dict[int, str] = {}
    for trace in traces:
        if trace.rank in seen:
            raise InputError(f"{trace.source}: rank {trace.rank} already read from {seen[trace.rank]}")
        seen[trace.rank] = trace.source
    return sorted(traces, key=lambda t: t.rank)
