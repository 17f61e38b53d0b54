"""``nsys recipe``: run one of NVIDIA's multi-report analyses and read its output folder into facts.

Recipes are a cross-check on our own analysis, and the quickest roll-up over many rank reports
(each input report is one rank). Their output columns are not a stable interface: they differ
between nsys releases, carry units in the header (``Total Time (ns)``) and index columns
written by pandas. So columns are found by a normalised name with a few aliases, units are
converted to ns, and a column we need but cannot find is one clear error naming the file.
Parquet is read with pyarrow when it is installed; the ``--csv`` copies are the fallback.

The nccl_gpu_overlap_trace and nvtx_gpu_proj_trace columns follow the 2024.x recipe sources
summarised in ``shared/notes/nsys.md``; those of cuda_gpu_kern_sum (the ``nsys stats`` report's
columns) and cuda_gpu_time_util_map (the heatmap family's) are inferred and still to be checked
against a real run, which is why every one of them has aliases.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from pydantic import BaseModel, ConfigDict, Field

from diagnoser.errors import InputError
from diagnoser.trace.nsys_export import check_report, run_nsys, writable_dir

Columns = dict[str, list]

_UNIT_NS = {"ns": 1.0, "nsec": 1.0, "us": 1e3, "usec": 1e3, "ms": 1e6, "msec": 1e6, "s": 1e9, "sec": 1e9}


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KernelSum(_Fact):
    name: str
    instances: int = Field(ge=0)
    total_ns: float = Field(ge=0)
    avg_ns: float | None = None
    median_ns: float | None = None
    min_ns: float | None = None
    max_ns: float | None = None
    rank: int | None = None


class UtilizationBin(_Fact):
    start_ns: float
    busy_percent: float = Field(ge=0, description="share of the bin with a kernel running (can exceed 100 with concurrency)")
    rank: int | None = None
    pid: int | None = None
    device: int | None = None


class CommOverlap(_Fact):
    name: str
    start_ns: float
    end_ns: float
    compute_overlap_percent: float = Field(description="share of this NCCL kernel overlapped by compute kernels")
    comm_overlap_percent: float | None = None
    rank: int | None = None
    pid: int | None = None
    device: int | None = None


class ProjectedRange(_Fact):
    text: str
    start_ns: float
    end_ns: float
    pid: int | None = None
    tid: int | None = None
    level: int | None = None
    rank: int | None = None


class RecipeFacts(_Fact):
    """One recipe's rows and the few figures the diagnosis uses from them."""

    recipe: str
    table: str = Field(description="the output file the rows came from")
    rows: list[KernelSum] | list[UtilizationBin] | list[CommOverlap] | list[ProjectedRange]
    summary: dict[str, float] = Field(default_factory=dict)


@dataclass(frozen=True)
class _Field:
    aliases: tuple[str, ...]  # normalised header names
    kind: type = float  # float (times converted to ns), int or str
    required: bool = True


@dataclass(frozen=True)
class _Recipe:
    tables: tuple[str, ...]  # output file stems to look for, best first
    fields: dict[str, _Field]
    row_type: type[_Fact]


_RANK = _Field(("rank",), int, False)
_PID = _Field(("pid", "processid"), int, False)
_DEVICE = _Field(("deviceid", "device", "devid"), int, False)
_START = _Field(("start", "starttime"))
_END = _Field(("end", "endtime"))

RECIPES: dict[str, _Recipe] = {
    "cuda_gpu_kern_sum": _Recipe(
        ("rank_stats", "all_stats", "stats"),
        {
            "name": _Field(("name", "kernelname", "shortname"), str),
            "instances": _Field(("instances", "count", "numcalls"), int),
            "total_ns": _Field(("totaltime", "total")),
            "avg_ns": _Field(("avg", "average", "mean"), required=False),
            "median_ns": _Field(("med", "median"), required=False),
            "min_ns": _Field(("min",), required=False),
            "max_ns": _Field(("max",), required=False),
            "rank": _RANK,
        },
        KernelSum,
    ),
    "cuda_gpu_time_util_map": _Recipe(
        ("analysis", "heatmap"),
        {
            "start_ns": _Field(("duration", "start", "binstart", "time")),
            "busy_percent": _Field(("inuse", "utilization", "kernel", "kernelutilization", "gpuutilization")),
            "rank": _RANK, "pid": _PID, "device": _DEVICE,
        },
        UtilizationBin,
    ),
    "nccl_gpu_overlap_trace": _Recipe(
        ("rank_trace", "trace"),
        {
            "name": _Field(("name",), str), "start_ns": _START, "end_ns": _END,
            "compute_overlap_percent": _Field(("computeoverlap",)),
            "comm_overlap_percent": _Field(("communicationoverlap", "commoverlap"), required=False),
            "rank": _RANK, "pid": _PID, "device": _DEVICE,
        },
        CommOverlap,
    ),
    "nvtx_gpu_proj_trace": _Recipe(
        ("trace",),
        {
            "text": _Field(("text", "name", "range"), str), "start_ns": _START, "end_ns": _END,
            "pid": _PID, "tid": _Field(("tid", "threadid"), int, False),
            "level": _Field(("stacklevel", "level"), int, False), "rank": _RANK,
        },
        ProjectedRange,
    ),
}


def recipe_command(name: str, reports: list[Path], out_dir: Path) -> list[str]:
    """``--csv`` as well as Parquet, so the output stays readable without pyarrow.

    Several reports (one per rank, as ``nsys profile -o run_%q{RANK}`` writes them) go to one
    ``--input``; the recipe numbers ranks by sorting the report names.
    """
    return ["recipe", name, "--input", *map(str, reports), "--output", str(out_dir), "--force-overwrite", "--csv"]


def run_recipe(name: str, reports: Path | list[Path], out_dir: Path | None = None, timeout_s: float = 1800) -> Path:
    """Run ``nsys recipe NAME`` on one report or several (one per rank); return its output folder."""
    if name not in RECIPES:
        raise InputError(f"nsys recipe: {name!r} is not one diagnoser reads (known: {', '.join(sorted(RECIPES))})")
    reports = [Path(r) for r in (reports if isinstance(reports, list) else [reports])]
    if not reports:
        raise InputError(f"nsys recipe {name}: no report given")
    for report in reports:
        check_report(report)
    first = reports[0]
    out_dir = Path(out_dir) if out_dir is not None else first.parent / f"{first.stem}.{name}"
    writable_dir(out_dir.parent, "pass --out to put the recipe output elsewhere")
    run_nsys(recipe_command(name, reports, out_dir), first, timeout_s, out_dir.parent / f"{out_dir.name}.log")
    if not out_dir.is_dir():
        raise InputError(f"{first}: `nsys recipe {name}` succeeded but wrote no folder {out_dir}")
    return out_dir


def read_recipe_output(name: str, out_dir: Path) -> RecipeFacts:
    """The rows of a recipe's output folder, typed, plus a summary of them."""
    if name not in RECIPES:
        raise InputError(f"{out_dir}: no reader for recipe {name!r} (known: {', '.join(sorted(RECIPES))})")
    spec = RECIPES[name]
    path, columns = _read_table(Path(out_dir), spec.tables)
    rows = _rows(path, columns, spec)
    return RecipeFacts(recipe=name, table=str(path), rows=rows, summary=_SUMMARIES[name](rows))


# --- reading tables -------------------------------------------------------------------------


def _read_table(out_dir: Path, stems: tuple[str, ...]) -> tuple[Path, Columns]:
    if not out_dir.is_dir():
        raise InputError(f"{out_dir}: no such recipe output folder")
    parquet_ok = _pyarrow() is not None
    for stem in stems:
        if parquet_ok and (out_dir / f"{stem}.parquet").is_file():
            return out_dir / f"{stem}.parquet", _read_parquet(out_dir / f"{stem}.parquet")
        if (out_dir / f"{stem}.csv").is_file():
            return out_dir / f"{stem}.csv", _read_csv(out_dir / f"{stem}.csv")
    wanted = ", ".join(f"{s}.parquet" if parquet_ok else f"{s}.csv" for s in stems)
    hint = "" if parquet_ok else " (pyarrow is not installed, so only CSV copies can be read)"
    raise InputError(f"{out_dir}: none of {wanted} in the recipe output{hint}")


def _pyarrow():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    return pq


def _read_parquet(path: Path) -> Columns:
    try:
        return _pyarrow().read_table(path).to_pydict()
    except Exception as err:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise InputError(f"{path}: unreadable Parquet file ({type(err).__name__})") from err


def _read_csv(path: Path) -> Columns:
    with open(path, newline="", encoding="utf-8", errors="replace") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        raise InputError(f"{path}: empty CSV file")
    header, body = rows[0], rows[1:]
    return {col: [row[i] if i < len(row) else "" for row in body] for i, col in enumerate(header)}


def _normalise(header: str) -> tuple[str, float]:
    """``Total Time (us)`` -> (``totaltime``, 1000.0): the name to match and the factor to ns."""
    unit = re.search(r"\(([a-z]+)\)", header.lower())
    factor = _UNIT_NS.get(unit.group(1), 1.0) if unit else 1.0
    bare = re.sub(r"\(.*?\)|:[a-z_%]+$", "", header.lower())
    return re.sub(r"[^a-z0-9]", "", bare), factor


def _rows(path: Path, columns: Columns, spec: _Recipe) -> list:
    by_name = {}
    for header in columns:
        key, factor = _normalise(header)
        by_name.setdefault(key, (header, factor))
    picked = {}
    for field, want in spec.fields.items():
        found = next((by_name[a] for a in want.aliases if a in by_name), None)
        if found is None and want.required:
            raise InputError(f"{path}: no column for {field} (looked for {', '.join(want.aliases)}; found {', '.join(columns)})")
        if found is not None:
            picked[field] = found
    count = len(next(iter(columns.values()))) if columns else 0
    out = []
    for i in range(count):
        values = {}
        for field, (header, factor) in picked.items():
            value = _convert(columns[header][i], spec.fields[field].kind, factor, path, header)
            if value is not None:
                values[field] = value
        out.append(spec.row_type(**values))
    return out


def _convert(raw, kind: type, factor: float, path: Path, header: str):
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if kind is str:
        return str(raw)
    try:
        number = float(str(raw).replace(",", "")) if isinstance(raw, str) else float(raw)
    except ValueError as err:
        raise InputError(f"{path}: column {header!r} holds {raw!r}, not a number") from err
    return int(number) if kind is int else number * factor


# --- summaries ------------------------------------------------------------------------------


def _kern_sum_summary(rows: list[KernelSum]) -> dict[str, float]:
    total = sum(r.total_ns for r in rows)
    nccl = sum(r.total_ns for r in rows if "nccl" in r.name.lower())
    return {"kernel_time_ns": total, "kernel_instances": float(sum(r.instances for r in rows)),
            "nccl_share_of_kernel_time": nccl / total if total else 0.0}


def _util_summary(rows: list[UtilizationBin]) -> dict[str, float]:
    if not rows:
        return {}
    busy = [r.busy_percent for r in rows]
    return {"mean_busy_percent": sum(busy) / len(busy), "min_busy_percent": min(busy), "bins": float(len(rows))}


def _overlap_summary(rows: list[CommOverlap]) -> dict[str, float]:
    """Time-weighted: the share of NCCL kernel time not hidden under compute is what a step pays."""
    durations = [max(r.end_ns - r.start_ns, 0.0) for r in rows]
    total = sum(durations)
    if not total:
        return {"nccl_kernels": float(len(rows))}
    hidden = sum(d * min(max(r.compute_overlap_percent, 0.0), 100.0) / 100 for d, r in zip(durations, rows))
    return {"nccl_kernels": float(len(rows)), "nccl_time_ns": total, "exposed_nccl_time_ns": total - hidden,
            "exposed_share": (total - hidden) / total}


def _proj_summary(rows: list[ProjectedRange]) -> dict[str, float]:
    if not rows:
        return {}
    return {"ranges": float(len(rows)), "median_gpu_span_ns": median(r.end_ns - r.start_ns for r in rows)}


_SUMMARIES = {
    "cuda_gpu_kern_sum": _kern_sum_summary,
    "cuda_gpu_time_util_map": _util_summary,
    "nccl_gpu_overlap_trace": _overlap_summary,
    "nvtx_gpu_proj_trace": _proj_summary,
}
