"""Writing files safely: outputs appear whole or not at all, inputs are never touched.

Every command that writes runs its output paths through ``check_outputs`` before it does any
work, so ``diagnose C -o C`` or ``analyze T --perfetto T`` is refused up front rather than
discovered after the input is gone. A case a command merges facts into is never rewritten in
place either: ``merged_case_path`` names the new file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from diagnoser.errors import InputError


def _umask() -> int:
    # os.umask can only be read by setting it; put it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, data: str | bytes, mode: int | None = None) -> Path:
    """Write to a temporary file beside ``path`` and rename it into place.

    The file gets ``mode``, or else the permissions an ordinary ``open()`` would give it (0666
    under the umask), not mkstemp's private 0600.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise InputError(f"{path}: cannot write: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, (0o666 & ~_umask()) if mode is None else mode)
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{path}: cannot write: {err.strerror or err}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _same_file(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_outputs(outputs: Iterable[tuple[str, str | Path | None]], inputs: Iterable[str | Path]) -> None:
    """Refuse, in one line, an output that is an input, a directory, or cannot be written.

    ``outputs`` pairs each path with the option that named it (``("-o", path)``), so the
    message says which flag to change. ``None`` paths (the option was not given) are skipped.
    Inputs may be folders: an output inside an input folder is allowed, the folder itself is not.
    """
    given = [(flag, Path(p)) for flag, p in outputs if p is not None]
    sources = [Path(p) for p in inputs]
    seen: dict[str, str] = {}
    for flag, path in given:
        for source in sources:
            if _same_file(path, source):
                raise InputError(f"{flag} {path}: is an input of this command; inputs are never overwritten")
        real = os.path.realpath(path)
        if real in seen:
            raise InputError(f"{flag} {path}: the same file as {seen[real]}; give each output its own path")
        seen[real] = flag
        if path.is_dir():
            raise InputError(f"{flag} {path}: is a directory, expected a file path")
        parent = path.parent if str(path.parent) else Path(".")
        existing = parent
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise InputError(f"{flag} {path}: {existing} is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise InputError(f"{flag} {path}: cannot write in {existing}")
        if path.exists() and not os.access(path, os.W_OK):
            raise InputError(f"{flag} {path}: the file is not writable")


def merged_case_path(case: str | Path, verb: str, explicit: str | Path | None = None) -> Path:
    """Where a command that adds facts to ``case`` writes the result.

    An explicit path wins; a case that does not exist yet is created where it was named;
    an existing case is left as it is and the merged copy goes beside it as
    ``NAME.<verb><suffix>`` (``run.analyzed.yaml``), so its comments, layout, mode and any
    symlink survive.
    """
    if explicit is not None:
        return Path(explicit)
    case = Path(case)
    if not case.exists():
        return case
    suffix = case.suffix or ".yaml"
    return case.with_name(f"{case.stem}.{verb}{suffix}")
