"""Prompts of a chosen length in tokens, for any tokenizer.

A text prompt of words is safe with every vocabulary (token ids sent as numbers are not: a
small vocabulary refuses ids beyond it), but its length in tokens is the tokenizer's. The
server counts the warm-up prompt's tokens in its usage, and that ratio sizes the rest; every
prompt plus its output is kept under the server's context limit.
"""

from __future__ import annotations

import random

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
WARM_UP_WORDS = 48


def words(n: int, seed: int) -> str:
    """``n`` pronounceable words, different for each seed, so prefix caching cannot hide a prefill."""
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((1, 2, 3)))) for _ in range(n))


def sized(tokens: int, tokens_per_word: float, seed: int) -> str:
    return words(max(1, round(tokens / max(tokens_per_word, 0.1))), seed)


def fit(prompt_tokens: int, max_tokens: int, max_model_len: int | None) -> tuple[int, int]:
    """Prompt and output lengths that fit the context limit, with a 10 % margin for the word estimate."""
    if max_model_len is None:
        return prompt_tokens, max_tokens
    room = int(max_model_len * 0.9)
    max_tokens = min(max_tokens, max(1, room // 2))
    return max(1, min(prompt_tokens, room - max_tokens)), max_tokens
