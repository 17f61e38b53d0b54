"""Parse a Chrome trace's event array piece by piece.

    event_pieces(data or stream) -> Iterator[(document | None, events)]

A rank's trace is often hundreds of MB, and a whole-document parse holds every event as a
Python object at once, although the analysis keeps under half of them (no Python stack
frames, CPU ops or flow arrows). Cutting the array at event boundaries and parsing each piece
alone lets the reader drop what it does not need before the next piece is parsed, so peak
memory holds one piece of unwanted events instead of all of them.

A cut is only a guess (a ``}, {`` between two events); a wrong guess leaves a piece with
unbalanced brackets, which orjson rejects, and then ``NotSplittable`` tells the caller to
parse the document whole. Nothing is ever parsed differently from a whole parse.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import orjson

PIECE_BYTES = 2 << 20  # measured on a 40 MB rank: 137 MB peak at 2 MB pieces, 165 at 4, 377 whole
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*\{")


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class NotSplittable(Exception):
    """The bytes cannot be cut into valid pieces here; parse the whole document instead."""


def event_pieces(
    source: bytes | Readable, piece_bytes: int | None = None, part: Part | None = None
) -> Iterator[tuple[dict | None, list]]:
    """Events in pieces; the last piece comes with the document (all other top-level keys).

    ``source`` is the bytes or anything with ``read(n)``: read as it goes, only about two pieces of
    the file are held at once, whatever its size. With ``part``, ``source`` is one part of the array
    (``array_parts``): its pieces, and the document only when the part is the last.
    """
    piece_bytes = piece_bytes or PIECE_BYTES
    stream = io.BytesIO(source) if isinstance(source, bytes) else source
    buffer = _read_up_to(stream, 2 * piece_bytes)
    if part is None:
        start = _ARRAY_START.search(buffer)
        if start is None or len(buffer) < 2 * piece_bytes:
            raise NotSplittable
        head, buffer = buffer[: start.end()], buffer[start.end() :]
    else:
        head = part.head
    scan_from, cut, ended = piece_bytes, part is not None, False
    while True:
        between = _BETWEEN_EVENTS.search(buffer, scan_from)
        if between is None:
            if ended:
                break
            # a cut that straddles the new bytes can only begin at the last brace already read
            last = buffer.rfind(b"}", scan_from)
            scan_from = last if last >= 0 else max(scan_from, len(buffer))
            chunk = stream.read(piece_bytes)
            ended = not chunk
            buffer += chunk
            continue
        comma = buffer.index(b",", between.start())
        events = _loads(b"[" + buffer[:comma] + b"]")
        if not isinstance(events, list):
            raise NotSplittable
        cut = True
        yield None, events
        buffer = buffer[comma + 1 :]
        scan_from = piece_bytes
    if not cut:
        raise NotSplittable
    if part is not None and not part.last:  # the part ends with an event, before the comma to the next part's
        events = _loads(b"[" + buffer + b"]")
        if not isinstance(events, list):
            raise NotSplittable
        yield None, events
        return
    document = _loads(head + buffer)
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise NotSplittable
    yield document, document["traceEvents"]


@dataclass(frozen=True)
class Part:
    """Bytes ``start`` to ``end`` of a file, whole events of its array (the last part runs to the file's end, so it
    holds the rest of the document); ``head`` is the file's bytes up to the array's opening bracket."""

    start: int
    end: int
    head: bytes
    last: bool


def array_parts(path: Path, parts: int, piece_bytes: int | None = None) -> list[Part]:
    """The event array of an uncompressed file cut into about ``parts`` equal parts, each starting at an event, to be
    parsed apart (in parallel) and joined in order. Each cut is a guess as ``event_pieces``' are: a wrong one leaves a
    part that orjson rejects, and ``NotSplittable`` (from the part's reader) sends the caller to the whole file."""
    piece_bytes = piece_bytes or PIECE_BYTES
    size = path.stat().st_size
    with open(path, "rb") as handle:
        start = _ARRAY_START.search(handle.read(2 * piece_bytes))
        if start is None:
            raise NotSplittable
        handle.seek(0)
        head = handle.read(start.end())
        cuts = [start.end()]
        for i in range(1, parts):
            handle.seek(max(cuts[-1], start.end() + (size - start.end()) * i // parts))
            window = handle.read(piece_bytes)
            between = _BETWEEN_EVENTS.search(window)
            if between is None:
                break
            at = handle.tell() - len(window) + window.index(b",", between.start())
            if at > cuts[-1]:
                cuts.append(at)
    bounds = [*cuts, size]
    return [
        Part(start=a + (i > 0), end=b, head=head, last=i == len(cuts) - 1)  # each later part starts after its comma
        for i, (a, b) in enumerate(zip(bounds, bounds[1:]))
    ]


class PartReader:
    """``read(n)`` over one part's bytes of a file."""

    def __init__(self, handle, part: Part) -> None:
        self._handle, self._left = handle, part.end - part.start
        handle.seek(part.start)

    def read(self, size: int) -> bytes:
        chunk = self._handle.read(min(size, self._left))
        self._left -= len(chunk)
        return chunk


def _read_up_to(stream: Readable, size: int) -> bytes:
    """``size`` bytes, fewer only at the end: a read may return less than asked."""
    parts, got = [], 0
    while got < size and (chunk := stream.read(size - got)):
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _loads(piece: bytes):
    try:
        return orjson.loads(piece)
    except orjson.JSONDecodeError:
        raise NotSplittable from None
