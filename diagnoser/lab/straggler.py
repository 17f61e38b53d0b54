"""Tensor parallel over two processes with torch.distributed, for the straggler fault.

Rank 0 is the engine; rank 1 is a worker process holding the other shard of one projection
per layer. Every step rank 0 broadcasts the step's token count (and whether it profiles),
then both ranks compute their shard and meet at an all-reduce at the end of each layer, as
tensor-parallel decode does. With ``late`` the worker computes its shard over a batch padded to
``LATE_ROWS`` rows before each all-reduce (a rank that pads to a captured size, or shares its
device), so rank 0 reaches every collective first and waits.

The backend (``backend_for``) is NCCL with rank r on ``cuda:r`` where the engine runs on a GPU
and a second one exists, and gloo on CPU tensors otherwise, a GPU engine's rank 0 included.

Only shapes and timing are shared: the worker's input is its own tensor of the step's shape,
which is all the collectives' timing depends on.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
import socket
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist

# The late rank's padded batch, its slow path: on one CPU core 1536 rows of a 512-wide GEMM take
# milliseconds; a GPU needs many more rows (about 17 GFLOP per layer, some hundreds of microseconds
# in fp32 on an H200) to be as late against its healthy step.
LATE_ROWS = {"gloo": 1536, "nccl": 32768}


def backend_for(device: str) -> tuple[str, str]:
    """The collective backend for an engine on ``device``, and why it is that one."""
    if device != "cuda":
        return "gloo", "the engine runs on the CPU"
    count = torch.cuda.device_count()
    if count >= 2:
        return "nccl", f"rank 0 on cuda:0 and rank 1 on cuda:1 ({count} GPUs)"
    # NCCL refuses two ranks on one device (a duplicate GPU), so one GPU has no NCCL form
    return "gloo", f"{count} GPU: NCCL needs a GPU per rank, so both ranks meet over gloo on host tensors"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shards(layers: int, hidden: int, rank: int, device: torch.device) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(hidden, hidden, generator=g) / hidden).to(device) for _ in range(layers)]


class TensorParallel:
    """Rank 0's side: starts the worker, and the per-step and per-layer collectives."""

    def __init__(self, layers: int, hidden: int, late: bool, device: str) -> None:
        self.layers, self.hidden = layers, hidden
        self.backend, _ = backend_for(device)
        # where the collectives' tensors live: rank 0's GPU under NCCL, the host under gloo
        self.comm = torch.device("cuda:0") if self.backend == "nccl" else torch.device("cpu")
        port = free_port()
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "diagnoser.lab.straggler", str(layers), str(hidden), "1" if late else "0", self.backend], env=env
        )
        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        _init(self.backend, 0, self.comm)
        self.shard = _shards(layers, hidden, 0, torch.device(device))  # beside the engine's activations
        self.trace_dir: Path | None = None

    def begin_step(self, step: int, tokens: int, profiling: bool) -> None:
        """The step's number travels too, so both ranks' traces name the same step alike."""
        dist.broadcast(torch.tensor([tokens, int(profiling), step], device=self.comm), src=0)

    def all_reduce(self, partial: torch.Tensor) -> torch.Tensor:
        if partial.device == self.comm:
            dist.all_reduce(partial)
            return partial
        # a GPU engine's rank 0 over gloo: the partial sum meets the peer's on the host, then goes back
        staged = partial.cpu()
        dist.all_reduce(staged)
        return staged.to(partial.device)

    def collect_profile(self, rank0_path: Path) -> list[Path]:
        """Tell the worker to write its trace beside rank 0's; wait for the file."""
        path = rank0_path.with_name(rank0_path.name.replace("rank0", "rank1"))
        name = torch.zeros(512, dtype=torch.uint8)
        encoded = str(path).encode()[:512]
        name[: len(encoded)] = torch.tensor(list(encoded), dtype=torch.uint8)
        dist.broadcast(torch.tensor([-1, 0, 0], device=self.comm), src=0)
        dist.broadcast(name.to(self.comm), src=0)
        dist.barrier()
        return [path]

    def close(self) -> None:
        try:
            dist.broadcast(torch.tensor([-2, 0, 0], device=self.comm), src=0)
            self.worker.wait(timeout=10)
        except Exception:  # noqa: BLE001 - the worker is killed below whatever went wrong
            pass
        if self.worker.poll() is None:
            self.worker.kill()
            self.worker.wait()
        dist.destroy_process_group()


def _init(backend: str, rank: int, device: torch.device) -> None:
    if backend == "nccl":
        torch.cuda.set_device(device)  # the barrier and every collective run on this rank's own GPU
        dist.init_process_group(backend, rank=rank, world_size=2, device_id=device)
    else:
        dist.init_process_group(backend, rank=rank, world_size=2)


def worker(layers: int, hidden: int, late: bool, backend: str) -> None:
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.set_num_threads(1)
    device = torch.device("cuda:1") if backend == "nccl" else torch.device("cpu")
    _init(backend, 1, device)
    shard = _shards(layers, hidden, 1, device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    profiler = None
    while True:
        header = torch.zeros(3, dtype=torch.int64, device=device)
        dist.broadcast(header, src=0)
        tokens, profiling, step = header.tolist()
        if tokens == -2:
            break
        if tokens == -1:  # write the trace where rank 0 says
            name = torch.zeros(512, dtype=torch.uint8, device=device)
            dist.broadcast(name, src=0)
            if profiler is not None:
                profiler.__exit__(None, None, None)
                profiler.export_chrome_trace(bytes(name[name > 0].tolist()).decode())
                profiler = None
            dist.barrier()
            continue
        if profiling and profiler is None:
            profiler = profile(activities=activities)
            profiler.__enter__()
        x = torch.randn(tokens, hidden, device=device)
        with record_function(f"ProfilerStep#{step}") if profiler is not None else nullcontext():
            for layer in range(layers):
                if late:  # the whole padded batch is computed; only the live rows are kept
                    padded = torch.zeros(max(LATE_ROWS[backend], tokens), hidden, device=device)
                    padded[:tokens] = x
                    partial = (padded @ shard[layer])[:tokens]
                else:
                    partial = x @ shard[layer]
                dist.all_reduce(partial)
    dist.destroy_process_group()


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4])
