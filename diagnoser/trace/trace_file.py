"""Opening a trace: only regular files, and never more bytes than a trace can hold.

    regular_file(path) -> int        the file's size; refuses a missing path, a folder, a FIFO, a device
    read_bytes(path) -> bytes        the whole file, gunzipped when it is gzip (whatever its suffix)
    open_stream(path) -> Stream      the same bytes a read at a time, so a reader holds a piece, not the file

``/dev/zero``, a named pipe or a terminal passed as a trace would otherwise be read until
memory runs out (or block forever), and a small gzip can expand without bound. So a path is
stat-ed before it is opened, and no trace, plain or decompressed, may exceed
``MAX_TRACE_BYTES`` (4 GiB): parsing needs the whole document in memory plus its events, and
a decode profile of a few steps is tens to hundreds of MB.
"""

from __future__ import annotations

import gzip
import os
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from diagnoser.errors import InputError

MAX_TRACE_BYTES = 4 << 30
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 64 << 20  # decompressed bytes per read: large enough that the loop costs nothing


def _limit_text() -> str:
    return f"{MAX_TRACE_BYTES / 2**30:g} GiB"


def regular_file(path: Path) -> int:
    """Size in bytes of ``path``, which must be an ordinary file (symlinks to one are fine)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path}: is a directory, expected a trace file")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: not a regular file (a pipe, socket or device); pass a trace file")
    return info.st_size


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic, at most ``MAX_TRACE_BYTES``."""
    size = regular_file(path)
    try:
        with open(path, "rb") as handle:
            if handle.read(2) != _GZIP_MAGIC:
                if size > MAX_TRACE_BYTES:
                    raise InputError(f"{path}: {size / 2**30:.1f} GiB, over the {_limit_text()} a trace may hold; "
                                     "profile fewer steps")
                handle.seek(0)
                return handle.read()
            handle.seek(0)
            return _gunzip(path, handle)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise InputError(f"{path}: truncated or corrupt gzip ({err})") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None


class Stream:
    """A trace's (gunzipped) bytes read in pieces, under the same limit and with the same messages as
    ``read_bytes``: a 3 GB trace then never sits in memory whole beside its parsed events."""

    def __init__(self, path: Path, handle, unzipped) -> None:
        self.path, self._handle, self._unzipped = path, handle, unzipped
        self.total = 0

    def read(self, size: int) -> bytes:
        try:
            chunk = (self._unzipped or self._handle).read(size)
        except (EOFError, gzip.BadGzipFile, zlib.error) as err:
            raise InputError(f"{self.path}: truncated or corrupt gzip ({err})") from None
        except OSError as err:
            raise InputError(f"{self.path}: cannot read ({err.strerror or err})") from None
        self.total += len(chunk)
        if self.total > MAX_TRACE_BYTES:
            what = "decompresses to more than" if self._unzipped else "is over"
            raise InputError(f"{self.path}: {what} the {_limit_text()} a trace may hold; profile fewer steps")
        return chunk


def is_gzip(path: Path) -> bool:
    """The file starts with gzip's magic (whatever its suffix)."""
    regular_file(path)
    try:
        with open(path, "rb") as handle:
            return handle.read(2) == _GZIP_MAGIC
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None


@contextmanager
def open_stream(path: Path) -> Iterator[Stream]:
    regular_file(path)
    try:
        handle = open(path, "rb")
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or err})") from None
    with handle:
        gzipped = handle.read(2) == _GZIP_MAGIC
        handle.seek(0)
        if not gzipped:
            yield Stream(path, handle, None)
            return
        with gzip.GzipFile(fileobj=handle) as unzipped:
            yield Stream(path, handle, unzipped)


def _gunzip(path: Path, handle) -> bytes:
    chunks: list[bytes] = []
    total = 0
    with gzip.GzipFile(fileobj=handle) as unzipped:
        while chunk := unzipped.read(_CHUNK):
            total += len(chunk)
            if total > MAX_TRACE_BYTES:
                raise InputError(f"{path}: decompresses to more than the {_limit_text()} a trace may hold; "
                                 "profile fewer steps")
            chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
