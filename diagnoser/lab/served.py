"""What the lab deploys for a set of faults: the model's shape, its tokenizer, and the settings it publishes.

    model_config(faults, vocab) -> ModelConfig
    tokenizer_for(faults, vocab) -> Tokenizer
    decode_path(faults, device) -> str        how a step of single-token decodes runs
    capture_sizes(max_seqs) -> tuple          batch sizes a decode graph is captured for
    server_info(faults, cfg, device) -> dict  vLLM's /server_info sections

Both processes need these (the API server to encode prompts, size requests and answer
``/server_info``; the engine core to build the model), and the API server never imports
torch, so they live here rather than beside the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnoser.lab.tokenizer import Tokenizer

PREFILL_CHUNK = 64
# Special tokens the slow tokenizer carries: thousands reserved (a chat model's) make each of its
# calls slow (detok-inline); a thousand make it slow per id, so a whole-output decode grows.
RESERVED_TOKENS = {"detok-inline": 8192, "detok-growing": 1024}
FREQUENCY_PENALTY = 0.5
PRESENCE_PENALTY = 0.5
TOP_P = 0.9
# Faults whose model step cannot be one fixed-shape function, so a GPU runs their decode steps
# kernel by kernel from Python, as every prefill step: the fault's work is what varies or syncs.
DYNAMIC_STEP = frozenset({
    "kv-gather",      # its block-by-block copies grow with each sequence's context, and the shapes with them
    "small-experts",  # its loop runs one GEMM per expert rows were routed to, the experts read back to the host
    "straggler",      # each layer ends in a collective with another process, outside any graph
})


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 8192
    hidden: int = 512
    heads: int = 8
    kv_heads: int = 1  # multi-query attention: every query head reads the one cached head
    layers: int = 2
    experts: int = 8
    top_k: int = 2
    expert_hidden: int = 256
    max_context: int = 4096
    max_seqs: int = 8
    gather_per_block: bool = False
    per_expert_loop: bool = False
    seed: int = 0


def decode_path(faults: frozenset[str], device: str) -> str:
    """How the engine runs a step whose sequences each feed one token.

    ``graph``: the static decode function, replayed from the CUDA graph captured for the step's
    batch size, as vLLM does by default. ``eager``: the very same function launched kernel by kernel
    from Python (``eager-launches``, as ``--enforce-eager``). ``dynamic``: the model's own forward, as
    every step with a prompt chunk runs; on a CPU always (there is nothing to capture), and on a GPU
    for the faults in ``DYNAMIC_STEP``. The sampling faults keep the graph: as in vLLM, only the model
    is captured, and the sampler runs after the replay on its logits.
    """
    if device != "cuda" or faults & DYNAMIC_STEP:
        return "dynamic"
    return "eager" if "eager-launches" in faults else "graph"


def capture_sizes(max_seqs: int) -> tuple[int, ...]:
    """Powers of two up to the scheduler's most sequences (and that number): a decode step pads its
    batch to the next one, so a few graphs serve every batch size."""
    sizes = [1]
    while sizes[-1] * 2 < max_seqs:
        sizes.append(sizes[-1] * 2)
    return tuple(sizes + [max_seqs]) if max_seqs > 1 else (1,)


def model_config(faults: frozenset[str], vocab: int) -> ModelConfig:
    small = "small-experts" in faults
    return ModelConfig(
        vocab=vocab,
        experts=64 if small else 8,
        top_k=8 if small else 2,
        expert_hidden=64 if small else 256,
        per_expert_loop=small,
        gather_per_block="kv-gather" in faults,
    )


def tokenizer_for(faults: frozenset[str], vocab: int) -> Tokenizer:
    """The served model's tokenizer: its reserved special tokens are what a detokenization fault pays for."""
    return Tokenizer(vocab, reserved=max((RESERVED_TOKENS.get(f, 0) for f in faults), default=0))


def server_info(faults: frozenset[str], cfg: ModelConfig, device: str) -> dict:
    """The settings a deployment would show (vLLM's /server_info names): what an engineer reads
    from flags and generation config, not which fault is on."""
    sampling = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
    sampler = "greedy"
    if "sort-sampler" in faults:
        sampling.update(temperature=1.0, top_p=TOP_P)
        sampler = "pytorch-native top-p"
    if "penalty-history" in faults:
        sampling.update(frequency_penalty=FREQUENCY_PENALTY, presence_penalty=PRESENCE_PENALTY)
    slow = "detok-inline" in faults  # the slow (pure-Python) tokenizer, as --tokenizer-mode slow
    model = {"max_model_len": cfg.max_context, "vocab_size": cfg.vocab, "tokenizer_mode": "slow" if slow else "auto"}
    info: dict = {"engine": "diagnoser-lab", "model_config": model}
    if device == "cuda":  # a CPU server has no graphs to turn on or off, so it says nothing of them
        model["enforce_eager"] = eager = decode_path(faults, device) != "graph"  # vLLM's name: no graph replay
        if not eager:
            info["compilation_config"] = {"cudagraph_capture_sizes": list(capture_sizes(cfg.max_seqs))}
    return info | {
        "scheduler_config": {
            "max_num_seqs": cfg.max_seqs,
            "enable_chunked_prefill": "prefill-stall" not in faults,
            "max_num_batched_tokens": PREFILL_CHUNK,
        },
        "default_sampling_params": sampling,
        "sampler": sampler,
    }
