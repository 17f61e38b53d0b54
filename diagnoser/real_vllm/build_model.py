"""Build a tiny random-weight model and its tokenizer on disk, with no download.

Run by the real vLLM's own Python (it imports transformers and tokenizers from that
environment, never diagnoser):

    VLLM_PYTHON build_model.py OUT_DIR [--moe]

The tokenizer is a byte-level BPE trained here on generated text, with 32,000 tokens: benchmark
clients send random token ids up to about 20,000, and a smaller vocabulary refuses them. The
model is a Qwen3 (dense, or MoE with 8 experts and top-2) small enough that a 2-core machine
serves it at a few milliseconds a step, which is what a test needs: real engine code paths,
not a real model's quality. Weights are seeded, so two builds are the same model.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

VOCAB = 32000
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def corpus(n_words: int = 400_000, seed: int = 0):
    """Words made of syllables, enough distinct ones for the BPE trainer to fill the vocabulary."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "sh", "qu", "x", "y"]
    line: list[str] = []
    for i in range(n_words):
        line.append("".join(rng.choice(syllables) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))))
        if len(line) == 16 or i == n_words - 1:
            yield " ".join(line) + rng.choice((".", ",", "!", "?", ";")) + f" {rng.randrange(10_000)}"
            line = []


def build_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None, unk_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_model(out: Path, vocab: int, moe: bool, eos_id: int, pad_id: int) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    shape = dict(
        vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, max_position_embeddings=4096, tie_word_embeddings=True,
        eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None, torch_dtype="bfloat16",
    )
    if moe:
        config = Qwen3MoeConfig(**shape, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=256, decoder_sparse_step=1)
        model = Qwen3MoeForCausalLM(config)
    else:
        model = Qwen3ForCausalLM(Qwen3Config(**shape))
    model.to(torch.bfloat16).save_pretrained(out)
    # a generation config with nothing set: the server's defaults are the engine's, unless a fault sets them
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_id, "pad_token_id": pad_id}) + "\n")


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2 or (len(argv) == 2 and argv[1] != "--moe"):
        print("usage: build_model.py OUT_DIR [--moe]", file=sys.stderr)
        return 2
    out = Path(argv[0])
    partial = out.with_name(out.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    fast = build_tokenizer(partial)
    build_model(partial, len(fast), "--moe" in argv, fast.convert_tokens_to_ids("<|im_end|>"), fast.convert_tokens_to_ids("<|endoftext|>"))
    partial.rename(out)  # a half-built model is never taken for a whole one
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
