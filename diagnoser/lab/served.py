"""What the lab deploys for a set of faults: the model's shape, its tokenizer, and the settings it publishes.

    model_config(faults, vocab) -> ModelConfig
    tokenizer_for(faults, vocab) -> Tokenizer
    server_info(faults, cfg) -> dict          vLLM's /server_info sections

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


def server_info(faults: frozenset[str], cfg: ModelConfig) -> dict:
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
    return {
        "engine": "diagnoser-lab",
        "model_config": {"max_model_len": cfg.max_context, "vocab_size": cfg.vocab, "tokenizer_mode": "slow" if slow else "auto"},
        "scheduler_config": {
            "max_num_seqs": cfg.max_seqs,
            "enable_chunked_prefill": "prefill-stall" not in faults,
            "max_num_batched_tokens": PREFILL_CHUNK,
        },
        "default_sampling_params": sampling,
        "sampler": sampler,
    }
