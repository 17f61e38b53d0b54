"""Reading a JSON document a user hands us, as JSON and nothing else, with one-line errors.

YAML reads ``2.64e1`` as a string and Python's json reads ``NaN`` as a float, so a document
that claims to be JSON goes through a strict JSON parser: every number arrives as a finite
number or the file is refused. At most ``max_bytes + 1`` bytes are ever read, so ``/dev/zero``
or a pipe that never ends is refused as too big instead of filling memory, and a FIFO nobody
writes to reads as empty instead of blocking.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from diagnoser.errors import InputError

DEFAULT_MAX_BYTES = 64 * 2**20


class _NotFinite(ValueError):
    """A NaN, Infinity or overflowing number; carries the text that produced it."""


def _refuse_constant(token: str) -> float:
    raise _NotFinite(token)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 overflows to inf
        raise _NotFinite(text)
    return value


def read_bytes(path: Path, what: str, max_bytes: int) -> bytes:
    try:
        # non-blocking open: a FIFO without a writer opens at once (and then reads as empty)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    except OSError as err:
        raise InputError(f"{path}: cannot open: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"{path}: is a directory, expected {what}")
        if stat.S_ISREG(info.st_mode) and info.st_size > max_bytes:
            raise InputError(f"{path}: larger than {max_bytes:,} bytes, too big for {what}")
        os.set_blocking(fd, True)
        data = bytearray()
        while len(data) <= max_bytes and (chunk := os.read(fd, max_bytes + 1 - len(data))):
            data += chunk
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise InputError(f"{path}: larger than {max_bytes:,} bytes, too big for {what}")
    return bytes(data)


def read_text(path: str | Path, what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The file's UTF-8 text, read with the same cap; YAML documents come in through here too."""
    path = Path(path)
    raw = read_bytes(path, what, max_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text (byte {err.start}), expected {what}") from None
    if not text.strip():
        raise InputError(f"{path}: file is empty, expected {what}")
    return text


def read_json(path: str | Path, what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """The parsed document at ``path``; ``what`` ("a probe report") names it in the messages.

    Every failure is an ``InputError`` of the form ``PATH: problem``.
    """
    path = Path(path)
    text = read_text(path, what, max_bytes)
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NotFinite as err:
        raise InputError(f"{path}: {err} is not a finite number; JSON figures must be finite") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON at line {err.lineno}:{err.colno}: {err.msg}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be {what}") from None
    except ValueError as err:  # e.g. an integer past Python's digit limit
        raise InputError(f"{path}: not valid JSON: {' '.join(str(err).split())}") from None
