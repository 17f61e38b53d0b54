"""Where an observed time was read (``Boundary``), in a module of its own.

The observations name a boundary and nothing else of the workload pin; kept apart, a trace's
facts are built without the workload models (``analyze``'s start pays only for what it reports).
"""

from __future__ import annotations

from enum import Enum


class Boundary(str, Enum):
    """Where an observed time was measured; each later boundary adds work the bound ignores."""

    device_step = "device_step"  # GPU time of one decode step (profiler, CUDA events)
    server_emission = "server_emission"  # interval between tokens leaving the server
    client_receipt = "client_receipt"  # interval between chunks arriving at the client
