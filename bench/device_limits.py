"""What the device tool brings back from $OUT, checked before a device minute is spent.

    files_and_problems(out) -> (files, problems)

The device tool returns at most 8 plain-named files from $OUT, each at most 16 MiB; a file
past those limits is left behind on a machine that is then given back. Both rehearsals
(bench/rehearse_device_check.sh, bench/rehearse_lab_device_check.sh) start from this check.
"""

from __future__ import annotations

import re
from pathlib import Path

MAX_FILES = 8
MAX_BYTES = 16 * 2**20


def files_and_problems(out: Path) -> tuple[list[Path], list[str]]:
    files = sorted(p for p in out.rglob("*") if p.is_file())
    problems = []
    if len(files) > MAX_FILES:
        problems.append(f"{len(files)} files in OUT; the device tool brings back {MAX_FILES}: {[p.name for p in files]}")
    problems += [f"name the device tool refuses: {p.name}" for p in files if not re.fullmatch(r"[A-Za-z0-9._-]+", p.name)]
    problems += [f"{p.name}: over 16 MiB" for p in files if p.stat().st_size > MAX_BYTES]
    return files, problems
