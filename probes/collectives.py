"""Collectives probe: all-reduce and all-to-all at decode message sizes, waiting versus transfer.

Decode collectives carry one hidden vector per sequence (batch x hidden x 2 bytes), so they
are latency-bound and their interval is dominated either by the fixed cost of the call or by
waiting for a late rank. The probe runs real ``torch.distributed`` ranks under ``torchrun``
(NCCL with one GPU per rank, else gloo on the host), collects every rank's arrival and
departure on the shared host clock, and lets ``collective_timeline`` split the interval.

Options read from ``ctx.options``: ``ranks`` (2), ``hidden`` (default: the ``model``'s, else
4096), ``batch_sizes`` ([1, 8, 64]) or ``message_bytes`` (explicit list), ``collective_ops``,
``collective_iterations`` (20), ``delay_rank`` and ``delay_ms`` (inject extra work before the
call on one rank).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from diagnoser.errors import InputError
from diagnoser.models.model_spec import resolve_model
from diagnoser.models.observations import CollectiveObs
from diagnoser.models.probe_results import CollectivesFacts, CollectiveSummary, InjectedDelay
from diagnoser.probes.base import ProbeContext, ProbeSkipped, ProbeTimeout, host_available_bytes
from diagnoser.probes.collective_timeline import CallRecord, summarise

OPS = ("all_reduce", "all_to_all")
MAX_ITERATIONS = 1000
MAX_MESSAGE_BYTES = 256 * 2**20
DEFAULT_HIDDEN = 4096
RANK_HOST_BYTES = 512 * 2**20  # resident size of one rank: interpreter, torch, process group
# lines of torchrun's own traceback that wrap a rank's failure without naming it
TORCHRUN_NOISE = ("torch.distributed.elastic", "raise ", "File ", "Traceback")
CLOCK = "time.time_ns (CLOCK_REALTIME), all ranks on one host"


def free_port() -> int:
    """A port the kernel just handed out on loopback; torchrun's store binds it right after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def hidden_size(options: dict[str, Any]) -> int:
    """The hidden width: given outright, else the workload's model (``--model`` or the case's)."""
    if options.get("hidden"):
        return int(options["hidden"])
    if options.get("model"):
        return resolve_model(options["model"]).hidden_size
    return DEFAULT_HIDDEN


def message_sizes(options: dict[str, Any]) -> list[int]:
    """Bytes per call: explicit sizes, or one bf16 hidden vector per sequence in the batch."""
    if options.get("message_bytes"):
        sizes = [int(s) for s in options["message_bytes"]]
    else:
        hidden = hidden_size(options)
        sizes = [int(b) * hidden * 2 for b in options.get("batch_sizes", [1, 8, 64])]
    bad = [s for s in sizes if not 0 < s <= MAX_MESSAGE_BYTES]
    if bad:
        raise InputError(f"collectives: message size(s) {bad} outside 1..{MAX_MESSAGE_BYTES} bytes")
    return sizes


def choose_backend(ctx: ProbeContext, ranks: int) -> tuple[str, str | None]:
    """NCCL needs a GPU per rank; with fewer, measure gloo on the host and say why."""
    if ctx.device != "cuda":
        return "gloo", None
    import torch

    count = torch.cuda.device_count()
    if count >= ranks:
        return "nccl", None
    return "gloo", f"{count} GPU(s) for {ranks} ranks: NCCL needs one GPU per rank, measured gloo on the host instead"


def torchrun_command(out_dir: Path, backend: str, ranks: int, sizes: list[int], options: dict[str, Any], timeout_s: float) -> list[str]:
    iterations = int(options.get("collective_iterations", 20))
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise InputError(f"collectives: collective_iterations must be 1..{MAX_ITERATIONS}, got {iterations}")
    ops = list(options.get("collective_ops", OPS))
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        raise InputError(f"collectives: unknown op(s) {unknown} (known: {', '.join(OPS)})")
    delay_rank = options.get("delay_rank")
    if delay_rank is not None and not 0 <= int(delay_rank) < ranks:
        raise InputError(f"collectives: delay_rank {delay_rank} is not a rank of a {ranks}-rank group")
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "1", "--nproc-per-node", str(ranks), "--max-restarts", "0",
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
        "-m", "diagnoser.probes.collective_worker",
        "--out", str(out_dir), "--backend", backend,
        "--ops", ",".join(ops), "--sizes", ",".join(map(str, sizes)),
        "--iterations", str(iterations),
        "--delay-rank", str(-1 if delay_rank is None else int(delay_rank)),
        "--delay-ms", str(float(options.get("delay_ms", 0.0))),
        "--timeout-s", str(max(5, int(timeout_s))),
    ]  # fmt: skip


def check_rank_budget(ctx: ProbeContext, ranks: int) -> None:
    """Refuse more ranks than the machine can host: each is a Python process with torch loaded."""
    cores = os.cpu_count() or 1
    if ranks > max(2, cores):
        raise InputError(f"collectives: {ranks} ranks on {cores} CPU cores; use at most {max(2, cores)}")
    wanted = ranks * RANK_HOST_BYTES
    allowed = host_available_bytes() * ctx.max_memory_fraction
    if wanted > allowed:
        raise ProbeSkipped(
            f"{ranks} ranks need about {wanted / 2**30:.1f} GiB of host memory, more than the allowed "
            f"{ctx.max_memory_fraction:.0%} of what is available ({allowed / 2**30:.1f} GiB)"
        )


def worker_env(backend: str) -> dict[str, str]:
    """One thread per rank (they share the cores), and gloo kept on loopback."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in env and "lo" in {n for _, n in socket.if_nameindex()}:
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def last_error_line(output: str) -> str:
    """The line of a failed launch that names the problem: a rank's own error, not the banner
    or the ChildFailedError that torchrun raises over it."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if ("Error" in line or "Exception" in line) and not line.startswith(TORCHRUN_NOISE):
            return line
    return lines[-1] if lines else "no output"


def launch(command: list[str], env: dict[str, str], timeout_s: float, cwd: Path | None = None) -> None:
    """Run torchrun in its own process group so a timeout takes its ranks down with it.

    ``cwd`` should be a scratch folder: ranks start with ``python -m``, which puts the working
    folder first on sys.path, so a source checkout there would shadow the installed package
    (its ``probes/`` folder is only ``diagnoser.probes`` once installed)."""
    proc = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ProbeTimeout(f"torchrun did not finish within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun exited with {proc.returncode}: {last_error_line(output)}")


def read_records(out_dir: Path, ranks: int) -> tuple[list[CallRecord], set[str], str]:
    """Every rank's calls, the hosts they ran on and the element type they moved."""
    records, hosts, dtype = [], set(), ""
    for rank in range(ranks):
        path = out_dir / f"rank{rank}.json"
        if not path.exists():
            raise RuntimeError(f"rank {rank} wrote no timings")
        document = json.loads(path.read_text())
        hosts.add(document["host"])
        dtype = document["dtype"]
        records.extend(CallRecord.model_validate(r) for r in document["records"])
    return records, hosts, dtype


def run(ctx: ProbeContext) -> CollectivesFacts:
    if importlib.util.find_spec("torch") is None:
        raise ProbeSkipped("torch is not installed")
    ranks = int(ctx.options.get("ranks", 2))
    if ranks < 2:
        raise ProbeSkipped(f"a collective needs at least 2 ranks, got {ranks}")
    check_rank_budget(ctx, ranks)
    sizes = message_sizes(ctx.options)
    backend, note = choose_backend(ctx, ranks)
    budget = min(ctx.timeout_s, ctx.remaining_s())
    with tempfile.TemporaryDirectory(prefix="diagnoser-collectives-") as tmp:
        out_dir = Path(tmp)
        launch(torchrun_command(out_dir, backend, ranks, sizes, ctx.options, budget), worker_env(backend), budget, cwd=out_dir)
        records, hosts, dtype = read_records(out_dir, ranks)
    if len(hosts) != 1:
        raise RuntimeError(f"ranks ran on {len(hosts)} hosts; their clocks cannot be compared")
    summaries = summarise(records, ranks)
    # Name a rank only where waiting, not moving bytes, dominated the interval.
    late = {s.late_rank for s in summaries if s.wait_ms > s.transfer_ms}
    delay_ms = float(ctx.options.get("delay_ms", 0.0))
    delay_rank = ctx.options.get("delay_rank")
    return CollectivesFacts(
        backend=backend,
        backend_note=note,
        dtype=dtype,
        world_size=ranks,
        clock=CLOCK,
        injected_delay=InjectedDelay(rank=int(delay_rank), ms=delay_ms) if delay_rank is not None and delay_ms > 0 else None,
        late_rank=late.pop() if len(late) == 1 else None,
        collectives=summaries,
    )


def to_observations(facts: CollectivesFacts) -> dict[str, Any]:
    """One CollectiveObs per op, at the largest message measured (where transfer cost shows most).

    Rules key their findings by op, so several sizes of one op would compete; every size
    stays in the probe report itself.
    """
    largest: dict[str, CollectiveSummary] = {}
    for item in facts.collectives:
        if item.op not in largest or item.message_bytes >= largest[item.op].message_bytes:
            largest[item.op] = item
    observations = [
        CollectiveObs(
            op=item.op,
            implementation=facts.backend,
            interval_ms=item.interval_ms,
            transfer_ms=item.transfer_ms,
            wait_ms=item.wait_ms,
            late_rank=item.late_rank,
            message_bytes=item.message_bytes,
            # the case holds algorithm bandwidth, as trace ingest computes it; bus bandwidth stays in the report
            effective_bandwidth_gbs=item.message_bytes / (item.transfer_ms / 1e3) / 1e9 if item.transfer_ms > 0 else None,
            group_size=item.group_size,
            preceding_compute_ms=item.preceding_compute_ms,
        )
        for item in largest.values()
    ]
    return {"collectives": observations} if observations else {}
