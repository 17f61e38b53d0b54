"""How many ranks may be read at once under one memory budget (``analyze --memory``).

    parse_size("2G") -> int                       bytes; K, M, G, T suffixes (powers of 1024)
    read_plan(paths, budget, cpus) -> (order, workers, notes)
    part_count(path, budget, cpus) -> (parts, notes)   one large rank read in parts on several cores

Reading a rank holds a piece of parsed events and the columns read so far, at most ``WORKING_SET_PER_BYTE``
times its JSON size beside the interpreter at the peak (measured on generated kernel-dense ranks read in one pass:
0.26 for 300 MB and 0.24-0.27 for 1 GB of eager decode, 0.20 for 382 MB and 0.18 for 3.8 GB of CUDA-graph decode;
the row-tuple reader this replaced needed 2.0), and parallel readers hold theirs at once: a folder of eight 1 GB
ranks read one per core would need several times the memory of one. So ranks are read largest first,
as many at a time as the largest of them fit in the budget together, and the report says when
the budget, not the cores, set that number: the reading is then slower than it could be.
"""

from __future__ import annotations

import re
from pathlib import Path

DEFAULT_MEMORY = "2G"
WORKING_SET_PER_BYTE = 0.35
BASE_BYTES = 60 << 20  # an interpreter with numpy and orjson loaded
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_GZIP_MAGIC = b"\x1f\x8b"


def parse_size(text: str) -> int:
    found = _SIZE.match(text)
    if found is None or float(found[1]) <= 0:
        raise ValueError(f"{text!r} is not a memory size (e.g. 2G, 512M)")
    return int(float(found[1]) * 1024 ** " KMGT".index(found[2].upper() or " "))


def json_bytes(path: Path) -> int:
    """The JSON size of a trace: a gzip file's trailer holds it (modulo 4 GiB, which is also the
    largest trace read)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            if handle.read(2) != _GZIP_MAGIC or size < 18:
                return size
            handle.seek(-4, 2)
            written = int.from_bytes(handle.read(4), "little")
    except OSError:  # the reader says what is wrong with it
        return 0
    return written if written >= size else 10 * size  # several gzip members: the trailer holds the last only


def working_set(path: Path) -> int:
    return BASE_BYTES + int(WORKING_SET_PER_BYTE * json_bytes(path))


# Reading one plain file in parts, every part's reader and the joined result at once, per byte of JSON beside the
# interpreters (peak of the process tree, two parts, generated kernel-dense ranks: 0.35 for 382 MB of CUDA-graph
# decode, 0.48 for 300 MB of eager decode with a launch per kernel, 0.21 for 3.8 GB of graph decode): the columns of
# each part, their copies sent to the parent, and the parent's join.
PARTS_PER_BYTE = 0.5
PARTS_FROM_BYTES = 64 << 20  # below this, starting the workers costs about what the parts save


def part_count(path: Path, budget: int, cpus: int) -> tuple[int, list[str]]:
    """How many parts (one process each) to read one large plain-JSON rank in, and why fewer than the cores."""
    size = json_bytes(path)
    if cpus < 2 or size < PARTS_FROM_BYTES:
        return 1, []
    fitting = next((k for k in range(cpus, 1, -1) if (k + 1) * BASE_BYTES + PARTS_PER_BYTE * size <= budget), 1)
    if fitting < 2:
        return 1, [f"memory budget {budget / 2**30:.3g} GiB: {path} read in one pass, not in {cpus} parts at once "
                   "(slower; raise --memory to read it in parts)"]
    return fitting, []


def read_plan(paths: list[Path], budget: int, cpus: int) -> tuple[list[int], int, list[str]]:
    """(the order to read ``paths`` in, largest first; ranks read at once; notes)."""
    sets = [working_set(p) for p in paths]
    order = sorted(range(len(paths)), key=lambda i: -sets[i])
    paths, sets = [paths[i] for i in order], [sets[i] for i in order]
    workers = max(1, min(len(paths), cpus))
    fitting = max(1, next((k for k in range(workers, 0, -1) if sum(sets[:k]) <= budget), 1))
    notes = []
    if fitting < workers:
        notes.append(
            f"memory budget {budget / 2**30:.3g} GiB: {fitting} of {len(paths)} ranks read at a time, not {workers} "
            "(slower; raise --memory to read more at once)"
        )
    if sets[0] > budget:
        notes.append(
            f"{paths[0]}: reading it needs about {sets[0] / 2**30:.3g} GiB, over the {budget / 2**30:.3g} GiB budget "
            "(--memory): read alone, and memory may still exceed the budget"
        )
    return order, fitting, notes
