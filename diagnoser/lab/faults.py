"""The lab's faults: named switches, each causing its cost by doing the extra work a real one does.

A fault never sleeps or reports itself: it changes what the engine, the model or the HTTP layer
does (more copies, a slower decoder in the wrong place, a sort of the whole vocabulary, chunks
held back), so the probes and the traces measure it from the outside. ``cause`` is the rule id
that names the fault's root cause: what ``bench/bench_lab.py`` and ``lab exercise`` score
against, and nothing the server or the diagnosis ever reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnoser.errors import InputError


CPU_AND_GPU = ("cpu", "cuda")


@dataclass(frozen=True)
class Fault:
    name: str
    cause: str  # the rule id of the true cause
    what: str
    devices: tuple[str, ...] = CPU_AND_GPU  # where its mechanism exists (the GPU-only ones, and why, below)
    # evidence the true cause must carry besides its id (name -> value): which rank is late, say
    names: tuple[tuple[str, object], ...] = ()

    def has_form(self, device: str) -> bool:
        return device in self.devices


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("none", "", "healthy: incremental detokenization off the engine loop, greedy argmax, chunked prefill"),
        Fault(
            "detok-inline", "server-output-processing",
            "the engine loop detokenizes every stream with a slow tokenizer (pure Python, 8192 reserved special "
            "tokens whose map it rebuilds on every call) over a 6-token prefix window before it starts the next "
            "step, instead of handing the ids to the output path's incremental decoder",
        ),
        Fault(
            "detok-growing", "output-length-growth",
            "the engine loop decodes each stream's whole output again every token with the slow decoder (which "
            "scans its 1024 reserved special tokens per id) and emits the new suffix, so its work per token grows "
            "with the tokens already generated",
        ),
        Fault(
            "buffered-stream", "proxy-buffering",
            "the HTTP layer holds finished SSE events and writes them in bursts of eight, as a buffering proxy does",
        ),
        Fault(
            "sort-sampler", "sort-sampling",
            "the deployment's default top-p (0.9, top-k off) runs as a full sort of the vocabulary for every row "
            "of the batch padded to max_num_seqs (as a sampler captured at a fixed batch size runs), greedy "
            "requests included, each result read back with a synchronising .item()",
        ),
        Fault(
            "penalty-history", "penalty-over-history",
            "default frequency and presence penalties count each sequence's tokens afresh every step, comparing "
            "the whole generated history with the vocabulary, so the step grows with the output",
        ),
        Fault(
            "small-experts", "small-expert-kernels",
            "fine-grained experts (64 experts, top-8, an eighth of the width) each run as a separate GEMM on the "
            "few rows routed to it; GPU only: its cost is grids too small to fill the SMs, and one CPU thread has no "
            "parallel units to leave idle (on a CPU the same loop costs about 2 % of the step)",
            devices=("cuda",),
        ),
        Fault(
            "eager-launches", "graphs-off",
            "decode steps are launched kernel by kernel from Python (as with enforce-eager) instead of replaying "
            "the CUDA graph captured for the batch size; GPU only: a CPU has no graph replay to turn off",
            devices=("cuda",),
        ),
        Fault(
            "straggler", "late-rank",
            "tensor parallel over two processes (gloo; NCCL on two GPUs); rank 1 computes its shard over a padded "
            "batch (1536 rows on gloo) before every all-reduce, so rank 0 waits at each collective",
            names=(("collectives[all_reduce].late_rank", 1),),
        ),
        Fault(
            "kv-gather", "long-context-slowdown",
            "attention assembles each sequence's KV cache block by block every step (no paged kernel), so KV "
            "reads and copies grow with the context",
        ),
        Fault(
            "prefill-stall", "prefill-stalls",
            "chunked prefill is off: a new prompt is prefilled whole, in one step ahead of the running decodes, "
            "instead of in chunks of 64 tokens beside them",
        ),
    )
}


def parse_faults(names: list[str] | tuple[str, ...], device: str = "cpu") -> frozenset[str]:
    """The faults named, checked: known, with a form on the device; ``none`` alone means healthy."""
    chosen = set()
    for name in names:
        if name not in FAULTS:
            raise InputError(f"--fault {name!r}: unknown fault (known: {', '.join(FAULTS)})")
        if not FAULTS[name].has_form(device):
            raise InputError(f"--fault {name}: no {device} form (it exists on {', '.join(FAULTS[name].devices)}); see `diagnoser lab faults`")
        if name != "none":
            chosen.add(name)
    return frozenset(chosen)


def with_form(device: str) -> list[str]:
    """The faults (``none`` included) that exist on the device."""
    return [name for name, fault in FAULTS.items() if fault.has_form(device)]
