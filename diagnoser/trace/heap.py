"""Freed arrays go back to the system (glibc), so a long analysis's peak is what it holds.

glibc serves a block of over 128 KB by a mapping of its own, given back when freed, but raises
that threshold to the largest such block freed so far (up to 32 MB): after the first big
temporary, arrays of a few MB (a column of a rank at 10^6 events) come from the heap, and what
the heap frees mid-way stays in the process. Analysing 10^6 CUDA-graph kernels held 60 MB of
freed heap beside 190 MB in use. Fixing the threshold keeps every such array in its own mapping;
small objects (the per-step rows) still come from the heap.
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
THRESHOLD = 128 * 1024  # glibc's own starting value


def map_large_blocks() -> None:
    """Fix glibc's mmap threshold at its starting value; nothing where the C library is not glibc."""
    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, THRESHOLD)
    except (OSError, AttributeError):  # no C library to load, or one without mallopt (macOS, musl)
        pass
