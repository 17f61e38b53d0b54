"""The lab's real faults made at other sizes: does ``diagnoser live`` still name each one first?

    python bench/bench_live_variants.py [VARIANT ...] [--duration S]

``bench/bench_live.py`` proves each fault at the one size the lab makes it. A server in the field has its own
sizes: two sequences admitted instead of one, a milder penalty, shorter prompts, a larger but still short cache.
Each variant here is a lab fault with its flags, traffic or load changed (``dataclasses.replace``), run against a
fresh real vLLM exactly as bench_live runs the lab's. The table has the same columns; run it alone on the machine
(two cores shared with another load change what the timings show, as bench_live's results note).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from bench_live import add_round_arguments, check_names, measured_round, print_table, rank_text  # run as python bench/bench_live_variants.py: bench/ is on the path
from diagnoser.lab.case import score
from diagnoser.real_vllm.faults import FAULTS, NGRAM, Traffic


def _prompt_of(tokens: int):
    """``tokens`` distinct token ids per request (a repeat would be a prefix-cache hit)."""
    return lambda i: [1000 + (7 * i + j) % 20000 for j in range(tokens)]


VARIANTS = {
    "max-num-seqs-2": replace(FAULTS["max-num-seqs-1"], name="max-num-seqs-2", flags=("--max-num-seqs", "2"),
                              how="--max-num-seqs 2 while the load keeps 8 streams in flight",
                              live={"concurrency": 8, "requests": 16}),
    "repetition-penalty-only": replace(
        FAULTS["default-penalties"], name="repetition-penalty-only",
        flags=("--override-generation-config", json.dumps({"repetition_penalty": 1.1})),
        how="a default repetition penalty of 1.1 alone, 16 streams at once"),
    "long-prompts-1200": replace(FAULTS["long-prompts"], name="long-prompts-1200",
                                 traffic=Traffic(_prompt_of(1200), 1, 0.2),
                                 how="1200-token prompts arriving every 0.2 s while the streams decode"),
    "kv-cache-12-blocks": replace(FAULTS["kv-cache-small"], name="kv-cache-12-blocks",
                                  flags=("--num-gpu-blocks-override", "12", "--max-model-len", "768"),
                                  how="a KV cache of 12 blocks under 16 streams of 256 tokens"),
    # A stronger penalty than the lab's keeps every stream off any n-gram of its context: the lookup finds no match
    # and drafts nothing (0 draft tokens in /metrics while tokens are generated), so nothing is rejected either.
    "ngram-no-match": replace(FAULTS["ngram-low-acceptance"], name="ngram-no-match", cause="speculation-inactive-overhead",
                              flags=("--speculative-config", json.dumps({**NGRAM, "num_speculative_tokens": 4})),
                              live={"extra": {"temperature": 0, "frequency_penalty": 0.5}},
                              how="n-gram speculation, 4 draft tokens, users sending frequency_penalty 0.5: no lookup "
                                  "finds a match, nothing is drafted"),
    "enforce-eager-16-streams": replace(FAULTS["enforce-eager"], name="enforce-eager-16-streams", live={"concurrency": 16},
                                        how="--enforce-eager under 16 streams at once"),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_arguments(parser, "variants", f"variants to run (default: all: {', '.join(VARIANTS)})", "VARIANT")
    args = parser.parse_args()
    check_names(parser, args.variants, VARIANTS)
    rows = []
    for name in args.variants or VARIANTS:
        fault = VARIANTS[name]
        result, took = measured_round(name, fault, args)
        s = score(result, fault.cause)
        rank = rank_text(s)
        rows.append((name, fault.how, fault.cause, rank, s.grade or "-", s.gain, s.runner_up, took))
        print(f"{name}: {rank}", file=sys.stderr)
    print_table(("variant", "made by", "true cause", "rank of the true cause", "grade", "bounded gain", "next cause", "time"), rows)
    return 1 if any(not r[3].startswith("1") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
