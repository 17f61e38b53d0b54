"""One rank of the collectives probe, started by ``torchrun`` (never imported by the CLI).

Each rank times every call on the host clock ``time.time_ns()`` (CLOCK_REALTIME). The probe
launches all ranks on one host, so they read the same kernel clock and their timestamps are
directly comparable; no offset estimate is needed or applied. On a GPU the stream is
synchronised before the arrival stamp (so the stamp marks the end of the preceding work, not
its launch) and after the call (so the departure marks a finished result).

An optional delay on one rank stands in for extra work before the call (a slower expert
shard, a host stall); the parent must then find that rank to blame.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from datetime import timedelta
from pathlib import Path

from diagnoser.fileio import write_atomic


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="directory for rank<N>.json")
    parser.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    parser.add_argument("--ops", default="all_reduce,all_to_all")
    parser.add_argument("--sizes", required=True, help="message sizes in bytes, comma separated")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--delay-rank", type=int, default=-1)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--timeout-s", type=float, default=60.0, help="process-group timeout")
    return parser.parse_args(argv)


def _collective(op: str, dist, torch, tensor):
    """A callable running ``op`` on ``tensor``; output buffers are allocated once, outside timing."""
    if op == "all_reduce":
        return lambda: dist.all_reduce(tensor)
    if op == "all_to_all":
        out = torch.empty_like(tensor)
        return lambda: dist.all_to_all_single(out, tensor)
    raise SystemExit(f"unknown collective {op!r}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    if args.backend == "nccl":
        # The device is chosen before the group exists so NCCL binds each rank to its own GPU.
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dtype, sync, barrier_ids = torch.bfloat16, torch.cuda.synchronize, [device.index]
    else:
        device, dtype, sync, barrier_ids = torch.device("cpu"), torch.float32, (lambda: None), None
    dist.init_process_group(args.backend, timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    element = torch.tensor([], dtype=dtype).element_size()
    delay_s = args.delay_ms / 1e3 if rank == args.delay_rank else 0.0

    records = []
    for op in args.ops.split(","):
        for wanted in (int(s) for s in args.sizes.split(",")):
            # all_to_all splits the buffer evenly, so the element count is a multiple of world.
            numel = max(world, wanted // element // world * world)
            tensor = torch.ones(numel, dtype=dtype, device=device)
            call = _collective(op, dist, torch, tensor)
            for _ in range(args.warmup):
                call()
            sync()
            dist.barrier(device_ids=barrier_ids)
            previous = time.time_ns()
            for iteration in range(args.iterations):
                if delay_s:
                    time.sleep(delay_s)
                sync()
                arrival = time.time_ns()
                call()
                sync()
                departure = time.time_ns()
                records.append(
                    {
                        "rank": rank,
                        "op": op,
                        "message_bytes": numel * element,
                        "iteration": iteration,
                        "arrival_ns": arrival,
                        "departure_ns": departure,
                        "compute_ns": arrival - previous,
                    }
                )
                previous = departure
    document = {
        "rank": rank,
        "world_size": world,
        "host": socket.gethostname(),
        "backend": args.backend,
        "dtype": str(dtype).removeprefix("torch."),
        "records": records,
    }
    write_atomic(Path(args.out) / f"rank{rank}.json", json.dumps(document))
    dist.barrier(device_ids=barrier_ids)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
