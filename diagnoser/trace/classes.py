"""Kernel classes from the versioned name-pattern table ``diagnoser/data/kernel_classes.json``.

Vendors rename kernels (``ncclKernel_*`` became ``ncclDevKernel_*``; vLLM and PyTorch ship
all-reduces that are not NCCL at all), and a regex buried in code silently misfiles them as
compute. Keeping the patterns in a data file makes a new name a one-line, reviewable change.
Classification runs once per distinct name, not per event.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from diagnoser.trace.model import narrowest

COMMUNICATION = "communication"


@dataclass(frozen=True)
class KernelClass:
    name: str
    implementation: str | None = None  # communication only: nccl, custom_allreduce, symm_mem
    op: str | None = None  # communication only: all_reduce, all_gather, ...

    @property
    def is_communication(self) -> bool:
        return self.name == COMMUNICATION


@dataclass(frozen=True)
class ClassTable:
    version: int
    rules: tuple[tuple[re.Pattern[str], str, str | None], ...]
    ops: tuple[tuple[re.Pattern[str], str], ...]
    default: str

    def classify(self, kernel_name: str) -> KernelClass:
        kernel_name = without_parameters(kernel_name)
        for pattern, name, implementation in self.rules:
            if pattern.search(kernel_name):
                if name != COMMUNICATION:
                    return KernelClass(name)
                op = next((op for op_pattern, op in self.ops if op_pattern.search(kernel_name)), "other")
                return KernelClass(name, implementation, op)
        return KernelClass(self.default)


def without_parameters(kernel_name: str) -> str:
    """Drop a demangled name's trailing parameter list: argument types ("...Accessor<float>", "gemm"
    inside a functor name) would otherwise match patterns meant for the kernel itself."""
    if not kernel_name.endswith(")"):
        return kernel_name
    depth = 0
    for i in range(len(kernel_name) - 1, -1, -1):
        ch = kernel_name[i]
        depth += ch == ")"
        depth -= ch == "("
        if depth == 0:
            return kernel_name[:i]
    return kernel_name


@lru_cache(maxsize=1)
def class_table() -> ClassTable:
    raw = json.loads(resources.files("diagnoser.data").joinpath("kernel_classes.json").read_text())
    rules = tuple((re.compile(r["pattern"], re.IGNORECASE), r["class"], r.get("implementation")) for r in raw["rules"])
    ops = tuple((re.compile(o["pattern"], re.IGNORECASE), o["op"]) for o in raw["ops"])
    return ClassTable(raw["version"], rules, ops, raw["default_class"])


@lru_cache(maxsize=65536)
def classify(kernel_name: str) -> KernelClass:
    """One name's class, remembered: ranks and tables share most names, and long demangled
    names make each regex search cost tens of microseconds."""
    return class_table().classify(kernel_name)


def classify_names(strings: list[str], name_ids: np.ndarray) -> tuple[list[KernelClass], np.ndarray]:
    """Classes of the distinct names used, and per row the index into that list, in the narrowest type
    that holds it: looked up by name in a table as long as ``strings``, where ``np.unique``'s inverse
    would be eight bytes a row (80 MB a table at 10^7 kernels)."""
    distinct = np.unique(name_ids)
    classes = [classify(strings[int(i)]) for i in distinct]
    position = narrowest(np.arange(len(distinct)))
    by_name = np.zeros(len(strings), dtype=position.dtype)
    by_name[distinct] = position
    return classes, by_name[name_ids]
