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


@dataclass(frozen=True)
class Fault:
    name: str
    cause: str  # the rule id of the true cause
    what: str


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("none", "", "healthy: incremental detokenization off the engine loop, greedy argmax, chunked prefill"),
        Fault(
            "detok-inline", "server-output-processing",
            "the engine loop detokenizes every stream with the slow pure-Python decoder (re-decoding the last "
            "512 tokens of the sequence, as a slow tokenizer's prefix window) before it starts the next step, "
            "instead of handing the ids to the output path's incremental decoder",
        ),
        Fault(
            "detok-growing", "output-length-growth",
            "the engine loop decodes each stream's whole output again every token with the slow decoder and "
            "emits the new suffix, so its work per token grows with the tokens already generated",
        ),
        Fault(
            "buffered-stream", "proxy-buffering",
            "the HTTP layer holds finished SSE events and writes them in bursts of eight, as a buffering proxy does",
        ),
        Fault(
            "sort-sampler", "sort-sampling",
            "sampling sorts the whole vocabulary (top-p over a full sort) per sequence and reads each result back "
            "with a synchronising .item()",
        ),
        Fault(
            "penalty-history", "penalty-over-history",
            "a repetition penalty is applied by rebuilding each sequence's whole token history as a tensor every "
            "step and scattering over it",
        ),
        Fault(
            "small-experts", "small-expert-kernels",
            "fine-grained experts (64 experts, top-8, a quarter of the width) each run as a separate GEMM on the "
            "few rows routed to it",
        ),
        Fault(
            "straggler", "late-rank",
            "tensor parallel over two processes (gloo); rank 1 does its shard of the MLP twice before every "
            "all-reduce, so rank 0 waits at each collective",
        ),
        Fault(
            "kv-gather", "long-context-slowdown",
            "attention assembles each sequence's KV cache block by block every step (no paged kernel), so KV "
            "reads and copies grow with the context",
        ),
        Fault(
            "prefill-stall", "prefill-stalls",
            "a new prompt is prefilled whole, in one step ahead of the running decodes, instead of in chunks "
            "of 64 tokens beside them",
        ),
    )
}


def parse_faults(names: list[str] | tuple[str, ...]) -> frozenset[str]:
    """The faults named, checked: known; ``none`` alone means healthy."""
    chosen = set()
    for name in names:
        if name not in FAULTS:
            raise InputError(f"--fault {name!r}: unknown fault (known: {', '.join(FAULTS)})")
        if name != "none":
            chosen.add(name)
    return frozenset(chosen)
