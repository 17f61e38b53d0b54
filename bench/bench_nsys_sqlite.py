"""Bench: reading an Nsight Systems SQLite export, against plainly fetching the same rows.

    .venv/bin/python bench/bench_nsys_sqlite.py [--copies 40] [--out /tmp/nsys-bench]

Builds a larger export from the shared 2-GPU training export (``mfu_2gpu_before.sqlite``,
300 ms): the activity, runtime, sync and NVTX rows are repeated ``--copies`` times, each copy
shifted past the previous one in time with its correlation ids moved, so the result is one long
capture of the same two processes. Then it prints, each in a fresh process: the time and peak
RSS of ``read_nsys_sqlite``, of ``read_nsys_sqlite`` plus ``analyze_traces``, and of a plain
``SELECT *`` + ``fetchall`` of the same tables (the floor any SQLite reader pays), and the ratio
of the reader to that floor. The machine is shared: run it when quiet and read the minimum.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO.parent / "shared" / "data" / "nsys" / "nsys-ai" / "mfu_2gpu_before.sqlite"
TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS",
)
CORRELATED = TABLES[:5]

MEASURE = """
import resource, sys, time
t = time.perf_counter()
{body}
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""
BODIES = {
    "read": "from diagnoser.trace.nsys_sqlite import read_nsys_sqlite\nread_nsys_sqlite(sys.argv[1])",
    "read+analyze": (
        "from diagnoser.trace.nsys_sqlite import read_nsys_sqlite\nfrom diagnoser.trace.analysis import analyze_traces\n"
        "analyze_traces(read_nsys_sqlite(sys.argv[1]))"
    ),
    "fetchall": (
        "import sqlite3\ndb = sqlite3.connect(sys.argv[1])\n"
        f"rows = [db.execute(f'SELECT * FROM {{t}}').fetchall() for t in {TABLES!r}]"
    ),
}


def build(target: Path, copies: int) -> Path:
    """The shared export repeated ``copies`` times in time, doubling what is there each pass (a pass
    per copy would rescan the growing tables ``copies`` times)."""
    shutil.copyfile(SOURCE, target)
    db = sqlite3.connect(target)
    lo = min(db.execute(f"SELECT MIN(start) FROM {t}").fetchone()[0] for t in TABLES)
    hi = max(db.execute(f'SELECT MAX("end") FROM {t}').fetchone()[0] for t in TABLES)
    span = hi - lo + 1_000_000
    corr_span = max(db.execute(f"SELECT MAX(correlationId) FROM {t}").fetchone()[0] or 0 for t in CORRELATED) + 1
    done = 1
    while done < copies:
        adding = min(done, copies - done)  # copies 0 .. adding-1, moved past the last one written
        for table in TABLES:
            cols = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
            shifted = []
            for c in cols:
                if c in ("start", "end"):
                    shifted.append(f'"{c}" + {done * span}')
                elif c == "correlationId" and table in CORRELATED:
                    shifted.append(f"correlationId + {done * corr_span}")
                else:
                    shifted.append(f'"{c}"')
            db.execute(f'INSERT INTO "{table}" SELECT {", ".join(shifted)} FROM "{table}" WHERE start < {lo + adding * span}')
        done += adding
    db.commit()
    db.close()
    return target


def kernels_per_copy() -> int:
    with closing(sqlite3.connect(SOURCE)) as db:
        return db.execute(f"SELECT COUNT(*) FROM {TABLES[0]}").fetchone()[0]


def measure(what: str, export: Path) -> tuple[float, float]:
    code = MEASURE.format(body=BODIES[what])
    out = subprocess.run([sys.executable, "-c", code, str(export)], capture_output=True, text=True, check=True, cwd=REPO)
    seconds, rss_mb = out.stdout.split()
    return float(seconds), float(rss_mb)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("/tmp/nsys-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not SOURCE.is_file():
        sys.exit(f"{SOURCE}: shared export not found")
    args.out.mkdir(parents=True, exist_ok=True)
    export = build(args.out / f"mfu_x{args.copies}.sqlite", args.copies)
    db = sqlite3.connect(export)
    counts = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
    db.close()
    print(f"export: {export} ({export.stat().st_size / 2**20:.0f} MiB), rows: "
          + ", ".join(f"{t.split('_')[-1]}={n:,}" for t, n in counts.items()))
    best = {}
    for what in BODIES:
        runs = [measure(what, export) for _ in range(args.repeat)]
        best[what] = (min(r[0] for r in runs), min(r[1] for r in runs))
        print(f"{what:>13}: {best[what][0]:6.2f} s  peak RSS {best[what][1]:6.0f} MiB  (min of {args.repeat})")
    print(f"read / fetchall time: {best['read'][0] / best['fetchall'][0]:.2f}x")


if __name__ == "__main__":
    main()
