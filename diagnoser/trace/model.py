"""One columnar model for every trace format.

Each event kind is a table of numpy arrays (one array per column, one row per event), so
the analyses are vectorised and a 10^6-event window costs megabytes, not a Python object
per event. Times are int64 nanoseconds on the trace's own clock; ``RankTrace.clock_offset_ns``
maps them onto the common clock used to align ranks. Names are interned: ``name`` columns
hold int32 indices into ``RankTrace.strings``.

Every reader holds its input to two limits, so no later sum or difference of times can
overflow int64 and no absurd value reaches a budget: a capture, from its first event to the
last event's end, spans at most ``MAX_CAPTURE_NS`` (one day; a decode profile spans seconds),
and every time and clock offset lies within ``MAX_CLOCK_NS`` (2**62 ns, 146 years) of zero, so
a time plus an offset still fits. Values past them are refused with the file's name.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np


MAX_CAPTURE_NS = 86_400 * 10**9
MAX_CLOCK_NS = 2**62


class RuntimeKind(IntEnum):
    """What a host-side CUDA runtime/driver call does for the critical path."""

    other = 0
    kernel_launch = 1  # cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel(Ex)
    graph_launch = 2  # cudaGraphLaunch
    sync = 3  # cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize
    memcpy = 4  # cudaMemcpy*, incl. D2H copies for sampling
    memset = 5


class CopyKind(IntEnum):
    other = 0
    h2d = 1
    d2h = 2
    d2d = 3
    memset = 4


INT_TYPES = (np.int8, np.int16, np.int32, np.int64)


def int_width(values: np.ndarray) -> int:
    """Index into ``INT_TYPES`` of the narrowest type that holds every value (0 when there are none)."""
    if not len(values):
        return 0
    lo, hi = int(values.min()), int(values.max())
    return next(i for i, t in enumerate(INT_TYPES) if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max)


def narrowest(values: np.ndarray) -> np.ndarray:
    """Integer values in the narrowest type that holds them: ids, devices, streams and launch shapes
    fit a byte to four, and at 10^7 rows every byte of a column is 10 MB."""
    return values.astype(INT_TYPES[int_width(values)], copy=False)


INT_TYPECODES = ("b", "h", "i", "q")  # array typecodes of INT_TYPES
_ARRAY_TYPES = dict(zip(INT_TYPECODES, INT_TYPES)) | {"d": np.float64}


def as_numpy(values: array) -> np.ndarray:
    """A growing ``array``'s contents as numpy, without a copy (readers grow columns as arrays:
    appending to one costs no copy of what is there, as ``np.append`` would)."""
    return np.frombuffer(values, dtype=_ARRAY_TYPES[values.typecode])


def append_narrow(values: array, piece: np.ndarray) -> array:
    """``values`` (an integer ``array`` growing a piece at a time) with ``piece`` appended, in the
    narrowest type that holds both: the whole column never exists wide, as it would if narrowed
    once read. A piece that does not fit widens what is there first (a new array, returned)."""
    width = max(INT_TYPECODES.index(values.typecode), int_width(piece))
    if INT_TYPECODES[width] != values.typecode:
        values = array(INT_TYPECODES[width], as_numpy(values).astype(INT_TYPES[width]).tobytes())
    values.frombytes(memoryview(np.ascontiguousarray(piece, dtype=INT_TYPES[width])).cast("B"))
    return values


@dataclass
class Table:
    """A set of equally long numpy columns."""

    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    def take(self, index: np.ndarray) -> Table:
        return Table({key: col[index] for key, col in self.columns.items()})

    def without_duplicates(self) -> tuple[Table, int]:
        """This table less every row identical in all columns to an earlier one, and how many went.

        A profiler buffer flushed twice or two captures pasted together would otherwise count
        the same kernel's time twice. Only rows that share a start time can be copies, and
        those are few, so only they are compared whole.
        """
        if len(self) < 2:
            return self, 0
        start = self["start"]
        ordered = np.sort(start)
        shared = ordered[1:][ordered[1:] == ordered[:-1]]
        if not len(shared):
            return self, 0
        candidates = np.flatnonzero(np.isin(start, shared))
        seen: set[tuple] = set()
        copies = []
        for index, row in zip(candidates.tolist(), zip(*(col[candidates].tolist() for col in self.columns.values()))):
            if row in seen:
                copies.append(index)
            else:
                seen.add(row)
        if not copies:
            return self, 0
        keep = np.ones(len(self), dtype=bool)
        keep[copies] = False
        return self.take(np.flatnonzero(keep)), len(copies)


# Column sets (readers fill what the format has; absent optional columns are omitted).
# kernels:  start, end, name, device, stream, correlation, [grid, block, registers, shared_mem, msg_bytes, graph_node,
#            graph_id, whole_graph, pid]   (the last three from Nsight Systems exports)
#           grid = CTAs per launch (product of the three grid dimensions), block = threads per CTA;
#           registers = per thread, shared_mem = bytes per CTA; absent values are -1.
#           msg_bytes = a collective kernel's message size (Kineto "In/Out msg nelems" x dtype), 0 = unknown.
# copies:   start, end, kind (CopyKind), bytes, device, stream, correlation, [pid]
# runtime:  start, end, name, kind (RuntimeKind), pid, tid, correlation, [sync_type]
# ranges:   start, end, name, pid, tid, [depth, domain]   (host-side user annotations, NVTX, ProfilerStep#N)
# shapes:   start, end, tid, flops, bytes, dtype (index into list(DType))   (host matmul ops with
#           recorded input shapes; a launch call inside one on the same thread belongs to it; may be empty)
# correlation joins a runtime call to the device work it launched; every kernel replayed by one
# cudaGraphLaunch carries that launch's correlation. -1 means "no launching call recorded".


@dataclass
class RankTrace:
    """All events of one rank (one process driving one GPU)."""

    source: str
    rank: int
    strings: list[str]
    kernels: Table
    copies: Table
    runtime: Table
    ranges: Table
    clock_offset_ns: int = 0
    device_sm_count: int | None = None
    device_name: str | None = None
    notes: list[str] = field(default_factory=list)  # what the reader could not find ("no NVTX table")
    shapes: Table = field(default_factory=Table)
    # start times (ns) of Python calls the profiler traced (with_stack): each one also cost the host time
    python_calls: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # host CPU ops (start, end, name, tid), kept only for traces with no GPU activity: see cpu_steps
    cpu_ops: Table = field(default_factory=Table)
    # Where a reader kept only the ranges the step finder reads unasked (step marks, ``steps.is_step_mark``),
    # this reads every range of the rank again; ``--step-range`` may name any (``all_ranges``).
    more_ranges: Callable[[], Table] | None = None

    def all_ranges(self) -> Table:
        """Every range of the rank, whatever the reader left out of ``ranges``."""
        return self.ranges if self.more_ranges is None else self.more_ranges()
