"""Kernel table per kernel class over a set of steps of one rank.

    kernel_table(trace, ops, steps) -> list[KernelClassRow]

Launch geometry decides whether a kernel can use the GPU at all: a grid with fewer CTAs than
the device has SMs leaves SMs idle however fast each CTA is, which is the usual fate of
small-batch decode GEMMs and expert kernels. So the table keeps median CTAs beside the SM
count and flags under-filled classes. Times are kernel durations (sums may exceed elapsed
time when streams overlap); they explain the device part of the budget, they are not it.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from diagnoser.models.hardware import match_hardware
from diagnoser.models.precision import DType
from diagnoser.trace.classes import classify_names
from diagnoser.trace.model import RankTrace, narrowest
from diagnoser.trace.ops import IS_KERNEL, DeviceOps
from diagnoser.trace.roofline import roofline
from diagnoser.trace.steps import Step


class KernelClassRow(BaseModel):
    kernel_class: str
    implementation: str | None = None
    count: int
    count_per_step: float
    total_us: float
    median_us: float
    share_of_kernel_time: float
    median_grid_ctas: float | None = None
    median_block_threads: float | None = None
    max_registers: int | None = None
    max_shared_mem_bytes: int | None = None
    sm_count: int | None = None
    underfilled: bool | None = None  # median CTAs below the SM count
    top_kernel: str
    # roofline, from the recorded shapes of the matmul ops that launched the class's kernels
    priced_ops: int = 0  # matmul ops with recorded shapes whose time this class owns
    achieved_tflops: float | None = None
    achieved_tbs: float | None = None
    flops_fraction: float | None = None
    bw_fraction: float | None = None
    roofline_bound: str | None = None  # memory or compute
    roof_fraction: float | None = None


def _median_known(values: np.ndarray) -> float | None:
    known = values[values >= 0]
    return float(np.median(known)) if len(known) else None


def _matmul_owners(
    matmul: np.ndarray, duration_us: np.ndarray, labels: np.ndarray
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per class label (``labels``: each kernel's label number): the matmul ops it owns and their kernel time.

    An op may launch several kernels (a cast, the GEMM, a split-K reduction); its FLOPs go once,
    over all its kernels' time, to the class of its longest kernel, so a small elementwise
    kernel inside ``aten::addmm`` is not credited with the whole GEMM.
    """
    priced = np.flatnonzero(matmul >= 0)
    if not len(priced):
        return {}
    op_ids, inverse = np.unique(matmul[priced], return_inverse=True)
    op_time = np.bincount(inverse, weights=duration_us[priced], minlength=len(op_ids))
    longest = np.full(len(op_ids), -1, dtype=np.int64)
    for i in np.argsort(duration_us[priced], kind="stable"):  # ascending: the last write is the longest
        longest[inverse[i]] = priced[i]
    owner = labels[longest]
    return {int(label): (op_ids[owner == label], op_time[owner == label]) for label in np.unique(owner)}


def _roofline_fields(trace: RankTrace, op_ids: np.ndarray, op_time_us: np.ndarray) -> dict:
    flops = float(trace.shapes["flops"][op_ids].sum())
    nbytes = float(trace.shapes["bytes"][op_ids].sum())
    seconds = float(op_time_us.sum()) / 1e6
    fields: dict = {"priced_ops": len(op_ids)}
    if seconds <= 0:
        return fields
    fields.update(achieved_tflops=flops / seconds / 1e12, achieved_tbs=nbytes / seconds / 1e12)
    hw = match_hardware(trace.device_name)
    if hw is not None:
        dtype = list(DType)[int(np.bincount(trace.shapes["dtype"][op_ids]).argmax())]
        roof = roofline(flops, nbytes, seconds, dtype, hw)
        fields.update(
            flops_fraction=roof.flops_fraction,
            bw_fraction=roof.bw_fraction,
            roofline_bound=roof.bound,
            roof_fraction=roof.roof_fraction,
        )
    return fields


DURATION_ROWS = 1 << 20  # kernels whose durations are taken at a time


def kernel_table(trace: RankTrace, ops: DeviceOps, steps: list[Step]) -> list[KernelClassRow]:
    rows = np.concatenate([s.ops for s in steps]) if steps else np.zeros(0, np.int64)
    rows = rows[ops.source[rows] == IS_KERNEL]
    if not len(rows):
        return []
    k = trace.kernels
    kernel_rows = ops.row[rows]  # the other columns are read per class: a copy of all of them is 35 bytes a kernel
    matmul = ops.matmul[rows]
    del rows  # a table of all steps holds every kernel: each array a kernel long is 10 MB a byte at 10^7
    classes, index = classify_names(trace.strings, k["name"][kernel_rows])  # names again per class, not held whole
    # each kernel's label as a number into the sorted label texts: the texts per kernel would be ~100 bytes each
    texts, of_class = np.unique(np.array([f"{c.name}/{c.implementation}" if c.implementation else c.name for c in classes]),
                                return_inverse=True)
    labels = narrowest(of_class.reshape(-1))[index]
    del index
    duration = np.empty(len(kernel_rows), dtype=np.float64)
    for lo in range(0, len(kernel_rows), DURATION_ROWS):  # ends, starts and their difference are 8 bytes a kernel each
        piece = kernel_rows[lo : lo + DURATION_ROWS]
        duration[lo : lo + len(piece)] = k["end"][piece] - k["start"][piece]
    duration /= 1000.0
    grand_total = float(duration.sum()) or 1.0
    owners = _matmul_owners(matmul, duration, labels)
    table = []
    for code, label in enumerate(texts):
        mine = labels == code
        d, my_rows = duration[mine], kernel_rows[mine]
        my_names = k["name"][my_rows]
        by_time = {int(n): float(d[my_names == n].sum()) for n in np.unique(my_names)}
        grid = _median_known(k["grid"][my_rows]) if "grid" in k else None
        sm = trace.device_sm_count
        regs = k["registers"][my_rows] if "registers" in k else np.zeros(0, np.int64)
        smem = k["shared_mem"][my_rows] if "shared_mem" in k else np.zeros(0, np.int64)
        kernel_class, _, implementation = str(label).partition("/")
        table.append(
            KernelClassRow(
                kernel_class=kernel_class,
                implementation=implementation or None,
                count=int(mine.sum()),
                count_per_step=float(mine.sum()) / len(steps),
                total_us=float(d.sum()),
                median_us=float(np.median(d)),
                share_of_kernel_time=float(d.sum()) / grand_total,
                median_grid_ctas=grid,
                median_block_threads=_median_known(k["block"][my_rows]) if "block" in k else None,
                max_registers=int(regs.max()) if len(regs) and regs.max() >= 0 else None,
                max_shared_mem_bytes=int(smem.max()) if len(smem) and smem.max() >= 0 else None,
                sm_count=sm,
                underfilled=(grid < sm) if grid is not None and sm else None,
                top_kernel=trace.strings[max(by_time, key=by_time.get)],
                **(_roofline_fields(trace, *owners[code]) if code in owners else {}),
            )
        )
    return sorted(table, key=lambda r: -r.total_us)
