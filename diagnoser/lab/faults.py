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
            "the deployment's default top-p (0.9, top-k off) runs as a full sort of the vocabulary per sequence, "
            "greedy requests included, each result read back with a synchronising .item()",
        ),
        Fault(
            "penalty-history", "penalty-over-history",
            "default frequency and presence penalties count each sequence's tokens afresh every step, comparing "
            "the whole generated history with the vocabulary, so the step grows with the output",
        ),
        Fault(
            "small-experts", "small-expert-kernels",
            "fine-grained experts (64 experts, top-8, an eighth of the width) each run as a separate GEMM on the "
            "few rows routed to it",
        ),
        Fault(
            "straggler", "late-rank",
            "tensor parallel over two processes (gloo); rank 1 computes its shard over a batch padded to 1024 rows "
            "before every all-reduce, so rank 0 waits at each collective",
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


def parse_faults(names: list[str] | tuple[str, ...]) -> frozenset[str]:
    """The faults named, checked: known; ``none`` alone means healthy."""
    chosen = set()
    for name in names:
        if name not in FAULTS:
            raise InputError(f"--fault {name!r}: unknown fault (known: {', '.join(FAULTS)})")
        if name != "none":
            chosen.add(name)
    return frozenset(chosen)
