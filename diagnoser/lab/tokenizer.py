"""The lab's own tokenizer: byte-level, so every id sequence detokenizes to real text.

Ids 0-255 are the raw bytes, ``EOS`` ends a sequence, and the rest are byte strings built
from syllables (with and without a leading space, as BPE vocabularies hold whole words and
word starts). Encoding is greedy longest match; decoding concatenates bytes. A random model
samples byte ids too, so a token can end inside a UTF-8 character: the incremental decoder
holds such bytes back until the character completes, as a server's streaming detokenizer must.

Two decoders, as real servers have two:

* ``StreamDecoder``: incremental, constant work per token (a fast tokenizer's path);
* ``slow_decode``: the pure-Python path of a slow tokenizer, GPT-2 style: ids to byte-level
  unicode tokens, each character mapped back to its byte, the bytes decoded, then the
  clean-up passes. Its cost is proportional to the ids it is given, which is why decoding
  the whole output every step costs more as the output grows.
"""

from __future__ import annotations

import codecs
import itertools
from functools import lru_cache

EOS = 256
_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"


@lru_cache(maxsize=1)
def byte_unicode() -> tuple[dict[int, str], dict[str, int]]:
    """GPT-2's reversible byte -> printable character map, and its inverse."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    forward = {b: chr(c) for b, c in zip(printable, chars)}
    return forward, {c: b for b, c in forward.items()}


class Tokenizer:
    def __init__(self, vocab_size: int = 8192, reserved: int = 0) -> None:
        """``reserved`` special tokens sit above the vocabulary (as chat models reserve thousands);
        the slow decoder rebuilds its map of them on every call, as slow tokenizers did before
        their added vocabulary was cached."""
        if vocab_size < 512:
            raise ValueError("vocab_size must be at least 512")
        self.vocab_size = vocab_size
        self.added_tokens = {vocab_size + i: f"<|reserved_special_token_{i}|>" for i in range(reserved)}
        pieces: list[bytes] = [bytes([b]) for b in range(256)] + [b""]
        syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
        for n in itertools.count(1):
            for combo in itertools.product(syllables, repeat=n):
                word = "".join(combo).encode()
                pieces += [b" " + word, word]
                if len(pieces) >= vocab_size:
                    break
            if len(pieces) >= vocab_size:
                break
        self.pieces = pieces[:vocab_size]
        self.index = {p: i for i, p in enumerate(self.pieces) if p}
        self.longest = max(len(p) for p in self.pieces)
        forward, _ = byte_unicode()
        self.unicode_tokens = ["".join(forward[b] for b in p) for p in self.pieces]

    def encode(self, text: str) -> list[int]:
        data = text.encode()
        ids, i = [], 0
        while i < len(data):
            for width in range(min(self.longest, len(data) - i), 0, -1):
                found = self.index.get(data[i : i + width])
                if found is not None:
                    ids.append(found)
                    i += width
                    break
        return ids

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")

    def added_vocab(self) -> dict[str, int]:
        """Special token -> id, in id order, built anew per call (the uncached slow path)."""
        return {token: i for i, token in sorted(self.added_tokens.items(), key=lambda item: item[0])}

    def slow_decode(self, ids: list[int]) -> str:
        """A slow tokenizer's decode, token by token in Python as its reference code runs: special
        ids skipped, ids to byte-level token strings, sub-texts grouped, each character mapped back
        to its byte, the bytes decoded, then the clean-up passes."""
        _, back = byte_unicode()
        special_ids = [EOS, *self.added_vocab().values()]  # a list, scanned per id, as the slow path does
        sub_texts: list[str] = []
        current: list[str] = []
        for i in ids:
            if i in special_ids or not 0 <= i < self.vocab_size:
                if current:
                    sub_texts.append("".join(current))
                    current = []
                continue
            current.append(self.unicode_tokens[i])
        if current:
            sub_texts.append("".join(current))
        decoded = []
        for sub in sub_texts:
            raw = bytearray()
            for char in sub:
                raw.append(back[char])
            decoded.append(raw.decode("utf-8", errors="replace"))
        text = "".join(decoded)
        for before, after in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't")):
            text = text.replace(before, after)
        return text


class StreamDecoder:
    """Incremental detokenization of one stream: each token's bytes once, partial characters held."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token: int) -> str:
        return self.decoder.decode(self.tokenizer.pieces[token])

    def flush(self) -> str:
        return self.decoder.decode(b"", final=True)
